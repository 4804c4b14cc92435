"""Reuse: answers the studio has already computed, given again instead of recomputed.

A request is *the same* as an earlier one when everything that decides its answer is
(:mod:`core.reuse.keys`): the model folder's content, the engine settings that change
outputs, and the request itself with its defaults applied (keys sorted, the name the
caller asked for resolved to the folder). Only a request whose answer does not vary is
reused (:func:`core.reuse.keys.deterministic`): temperature 0 or a ``seed``, and every
embeddings, score and rerank request.

The job folders stay the truth: each job keeps, beside its ``output.jsonl``, the keys of
its answers and where their lines lie (:mod:`core.reuse.index`); a job's start reads them
all, and deleting a job deletes its entries with it. :mod:`core.reuse.plan` decides, for
the requests of one run, which come from earlier lines, which duplicates run once, and
which the engine computes.
"""
