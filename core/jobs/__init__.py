"""Jobs on disk: the job folder, submission, the ledger of results, the queue, the inbox."""
