"""The DuckDB tables (numbered migrations) and the SQL that turns job-folder lines into rows.

Requests come from ``input.jsonl`` and results from ``output.jsonl`` / ``errors.jsonl``;
each line is read with ``json_transform`` into the shapes below, so ingest runs inside
DuckDB at full speed.
"""

from __future__ import annotations

import json
import re

# A result's searchable text: its prompt and answer, lowercased, on two lines. The prompt
# is lowered once, when the job's requests are loaded (requests.prompt_lower), so that
# results stream in at full speed.
SEARCH_TEXT_SQL = "concat_ws(chr(10), {prompt_lower}, lower({answer}))"

# A chat answer's tool calls as a person reads them, one call a line: ``name(arguments)``
# (NULL where the answer is text). ``answer`` keeps the first call's arguments, which checks
# grade; this is what pages and exports show.
CALLS_SHAPE = json.dumps([{"function": {"name": "VARCHAR", "arguments": "VARCHAR"}}])


# Compare's keys (core.store.compare) and a field's values sort in natural order: each run
# of digits by its value (t2 before t10), the rest as text. The rule: each run of up to 99
# digits is written after its length in two digits (t2 -> t012, t10 -> t0210), and the
# results compare as text. Distinct keys stay distinct (paging past a key skips no other),
# and Python's natural_key and SQL's natural_sql say the same.
_DIGITS = "[0-9]{1,99}"


def natural_key(text: str) -> str:
    """``text``'s natural sort key (``t2`` before ``t10``), as :func:`natural_sql` makes it."""
    return re.sub(_DIGITS, lambda m: f"{len(m.group()):02d}{m.group()}", text)


def natural_sql(expr: str) -> str:
    """SQL of ``expr``'s natural sort key: :func:`natural_key` in DuckDB."""
    runs = f"regexp_extract_all({expr}, '{_DIGITS}|[^0-9]+')"
    return (
        f"array_to_string(list_transform({runs}, lambda x: CASE WHEN x[1] BETWEEN '0' AND '9' "
        "THEN lpad(CAST(length(x) AS VARCHAR), 2, '0') || x ELSE x END), '')"
    )


def tool_calls_sql(calls: str) -> str:
    """``name(arguments)`` lines from a list of OpenAI tool calls (``calls`` is SQL)."""
    return (
        f"nullif(array_to_string(list_transform({calls}, lambda c: "
        "c.function.name || '(' || c.function.arguments || ')'), chr(10)), '')"
    )


# The answer as a page shows it (results r): the calls where the model called a tool (with
# any text it wrote first), else the answer.
SHOWN_ANSWER_SQL = (
    "CASE WHEN r.tool_calls IS NULL THEN r.answer "
    "WHEN r.answer IS NULL OR contains(r.tool_calls, r.answer) THEN r.tool_calls "
    "ELSE r.answer || chr(10) || r.tool_calls END"
)


# Numbered migrations, applied in order at start-up; never edit one that has shipped.
MIGRATIONS: list[str] = [
    """
    CREATE TABLE jobs (
        job_id VARCHAR PRIMARY KEY,
        created_at TIMESTAMPTZ,
        source VARCHAR,
        model VARCHAR,
        folder VARCHAR,
        state VARCHAR,
        total INTEGER,
        succeeded INTEGER,
        failed INTEGER,
        prompt_tokens BIGINT,
        completion_tokens BIGINT,
        error VARCHAR
    );
    CREATE TABLE requests (
        job_id VARCHAR,
        custom_id VARCHAR,
        line_no INTEGER,
        model VARCHAR,
        prompt VARCHAR,
        messages JSON,
        PRIMARY KEY (job_id, custom_id)
    );
    CREATE TABLE results (
        job_id VARCHAR,
        custom_id VARCHAR,
        status VARCHAR,
        status_code INTEGER,
        answer VARCHAR,
        finish_reason VARCHAR,
        prompt_tokens INTEGER,
        completion_tokens INTEGER,
        error_code VARCHAR,
        error_message VARCHAR,
        raw JSON,
        PRIMARY KEY (job_id, custom_id)
    );
    CREATE TABLE ingest_state (
        job_id VARCHAR PRIMARY KEY,
        requests_loaded BOOLEAN,
        output_offset BIGINT
    );
    """,
    # Results that analysts judge: request metadata, answer times, samples and labels.
    # Re-ingesting fills the new columns for jobs ingested before (ingest is idempotent).
    """
    ALTER TABLE requests ADD COLUMN metadata JSON;
    ALTER TABLE requests ADD COLUMN prompt_version VARCHAR;
    ALTER TABLE requests ADD COLUMN params JSON;
    ALTER TABLE results ADD COLUMN model VARCHAR;
    ALTER TABLE results ADD COLUMN created_at TIMESTAMPTZ;
    -- copied from the request at ingest so that browsing a million rows needs no join
    ALTER TABLE results ADD COLUMN line_no INTEGER;
    ALTER TABLE results ADD COLUMN prompt VARCHAR;
    ALTER TABLE results ADD COLUMN prompt_version VARCHAR;
    ALTER TABLE results ADD COLUMN metadata JSON;
    UPDATE ingest_state SET requests_loaded = false, output_offset = 0;
    CREATE TABLE samples (
        sample_id VARCHAR PRIMARY KEY,
        name VARCHAR,
        created_at TIMESTAMPTZ DEFAULT now(),
        definition JSON,
        size INTEGER
    );
    CREATE TABLE sample_items (
        sample_id VARCHAR,
        position INTEGER,
        job_id VARCHAR,
        custom_id VARCHAR,
        stratum VARCHAR,
        PRIMARY KEY (sample_id, position)
    );
    CREATE TABLE reviews (
        job_id VARCHAR,
        custom_id VARCHAR,
        reviewer VARCHAR,
        verdict VARCHAR,
        score INTEGER,
        tags VARCHAR[],
        comment VARCHAR,
        corrected_answer VARCHAR,
        sample_id VARCHAR,
        updated_at TIMESTAMPTZ DEFAULT now(),
        PRIMARY KEY (job_id, custom_id, reviewer)
    );
    CREATE TABLE preferences (
        comparison VARCHAR,
        key VARCHAR,
        reviewer VARCHAR,
        job_a VARCHAR,
        custom_id_a VARCHAR,
        job_b VARCHAR,
        custom_id_b VARCHAR,
        choice VARCHAR,
        updated_at TIMESTAMPTZ DEFAULT now(),
        PRIMARY KEY (comparison, key, reviewer)
    );
    """,
    # The job ledger: failures live in errors.jsonl (read from their own offset), and each
    # state a job passes through is kept with its time.
    """
    ALTER TABLE ingest_state ADD COLUMN errors_offset BIGINT DEFAULT 0;
    CREATE TABLE job_events (
        job_id VARCHAR,
        state VARCHAR,
        entered_at TIMESTAMPTZ,
        PRIMARY KEY (job_id, state, entered_at)
    );
    """,
    # Per-request latency (``latency_ms`` of a result line: entering the engine to the final
    # output). Lines written before the engine recorded it keep NULL; nothing to re-read.
    """
    ALTER TABLE results ADD COLUMN latency_ms INTEGER;
    """,
    # Search: prompt and answer lowercased in one column, read by every search first (see
    # core.store.results.where): lowering a million texts at each search cost most of its time.
    """
    ALTER TABLE requests ADD COLUMN prompt_lower VARCHAR;
    UPDATE requests SET prompt_lower = lower(prompt);
    ALTER TABLE results ADD COLUMN search_text VARCHAR;
    UPDATE results SET search_text = concat_ws(chr(10), lower(prompt), lower(answer));
    """,
    # Job names (job.json's, or a rename's name.txt), so pages label jobs without opening
    # each folder; every ingest writes the job's row again, so the next one fills it.
    """
    ALTER TABLE jobs ADD COLUMN name VARCHAR DEFAULT '';
    """,
    # Checks (core/qa): per result, each rule's outcome in the order of the job's rules
    # (passed NULL: not graded), with the result's model and prompt version so that pass
    # rates need no join; and per job, the rules it was graded with (their names in order)
    # and how many results there were then. One row per result, not per result and rule:
    # a million results by five rules write a million rows. No key: a job's outcomes are
    # replaced whole. Rebuilt from each job folder's rules.yaml when missing or stale.
    """
    CREATE TABLE rule_outcomes (
        job_id VARCHAR,
        custom_id VARCHAR,
        passed BOOLEAN[],
        model VARCHAR,
        prompt_version VARCHAR
    );
    CREATE TABLE rule_runs (
        job_id VARCHAR PRIMARY KEY,
        rules_digest VARCHAR,
        rules JSON,
        names VARCHAR[],
        results BIGINT,
        succeeded BIGINT,
        graded_at TIMESTAMPTZ
    );
    """,
    # Embeddings (core.store.vector_ingest): each job's vector size, and the inputs whose
    # vector could not be read. The vectors themselves go to one table per size
    # (vectors_384, ...), made when the first vector of that size arrives.
    """
    CREATE TABLE vector_jobs (job_id VARCHAR PRIMARY KEY, dims INTEGER);
    CREATE TABLE vector_problems (
        job_id VARCHAR,
        custom_id VARCHAR,
        input_index INTEGER,  -- -1: the line as a whole
        problem VARCHAR,
        PRIMARY KEY (job_id, custom_id, input_index)
    );
    """,
    # Judge jobs (core.qa.judge): what each grades, from its job.json's ``judge``. Their
    # verdicts are read from their own results (core.store.judged), so they are never stale.
    """
    CREATE TABLE judge_links (
        judge_job VARCHAR PRIMARY KEY,
        kind VARCHAR,
        graded VARCHAR[],
        check_name VARCHAR
    );
    """,
    # Read again the jobs whose requests had no prompt to search (embeddings lists of texts,
    # Responses input lists) or whose stored lines held their vectors a second time: the
    # store is an index, so the next ingest rebuilds their rows from the job folders.
    """
    UPDATE ingest_state SET requests_loaded = false, output_offset = 0, errors_offset = 0
    WHERE job_id IN (SELECT job_id FROM vector_jobs)
       OR job_id IN (SELECT job_id FROM requests
                     WHERE prompt IS NULL AND json_type(messages) = 'ARRAY');
    """,
    # How far ingest had read a job's result files (ingest_state's offsets) when it was
    # graded: its outcomes are stale when ingest has read on since, which a page finds
    # without counting the job's results. NULL (graded before): graded again once.
    """
    ALTER TABLE rule_runs ADD COLUMN ingested_bytes BIGINT;
    """,
    # People's work is written to files first (core.human.files) and indexed from them:
    # how far each file was read, the lines that could not be, and every label as saved
    # (who changed a verdict and when; ``reviews`` keeps the latest).
    """
    -- no key: three rows, updated on every save, where a key's upkeep cost more than a scan
    CREATE TABLE human_files (file VARCHAR, byte_offset BIGINT, lines BIGINT);
    CREATE TABLE human_file_problems (
        file VARCHAR,
        line_no BIGINT,
        problem VARCHAR,
        PRIMARY KEY (file, line_no)
    );
    CREATE TABLE review_history (
        job_id VARCHAR,
        custom_id VARCHAR,
        reviewer VARCHAR,
        verdict VARCHAR,
        score INTEGER,
        tags VARCHAR[],
        comment VARCHAR,
        corrected_answer VARCHAR,
        sample_id VARCHAR,
        saved_at TIMESTAMPTZ,
        line_no BIGINT
    );
    """,
    # Tool calls shown as calls (see tool_calls_sql), filled from the stored lines.
    f"""
    ALTER TABLE results ADD COLUMN tool_calls VARCHAR;
    UPDATE results SET tool_calls = {
        tool_calls_sql(
            "json_transform(raw -> '$.response.body.choices[0].message.tool_calls', "
            f"'{CALLS_SHAPE}')"
        )
    }
    WHERE status = 'succeeded' AND contains(CAST(raw AS VARCHAR), '"tool_calls"');
    """,
    # The latest label per result and reviewer without a key: a save deletes its row and
    # inserts the new one under the edits writer (core.store.human_index); the key's upkeep
    # (INSERT OR REPLACE through an index) was most of a save's time, which eight reviewers
    # saving at once wait on in turn.
    """
    CREATE TABLE reviews_unkeyed (
        job_id VARCHAR,
        custom_id VARCHAR,
        reviewer VARCHAR,
        verdict VARCHAR,
        score INTEGER,
        tags VARCHAR[],
        comment VARCHAR,
        corrected_answer VARCHAR,
        sample_id VARCHAR,
        updated_at TIMESTAMPTZ DEFAULT now()
    );
    INSERT INTO reviews_unkeyed SELECT * FROM reviews;
    DROP TABLE reviews;
    ALTER TABLE reviews_unkeyed RENAME TO reviews;
    """,
    # Each job's Results filter values, with the result-file bytes ingested when they were
    # read (core/store/facets.py): kept while those are unchanged, read again after.
    """
    CREATE TABLE job_facets (job_id VARCHAR PRIMARY KEY, lines BIGINT, facets JSON);
    """,
    # The job a reused answer was made by (``reused_from`` of a result line, docs/reuse.md);
    # NULL for an answer the engine made for its own line, as every line before reuse.
    """
    ALTER TABLE results ADD COLUMN reused_from VARCHAR;
    """,
    # The job's running time over all its runs (status.json's job_seconds): what a GPU-hour
    # price is charged on (core.store.costs). Every ingest writes the job's row again.
    """
    ALTER TABLE jobs ADD COLUMN engine_seconds DOUBLE;
    """,
    # An owner's final label of an item whose reviewers differ, every one as saved
    # (data/human/adjudications.jsonl; an item's latest, by line_no, is its final label).
    """
    CREATE TABLE adjudications (
        job_id VARCHAR,
        custom_id VARCHAR,
        verdict VARCHAR,
        adjudicator VARCHAR,
        note VARCHAR,
        sample_id VARCHAR,
        saved_at TIMESTAMPTZ,
        line_no BIGINT
    );
    """,
    # A label's answers to its sample's schema questions (core.human.questions), by
    # question title; NULL for a label without them (every label before schemas).
    """
    ALTER TABLE reviews ADD COLUMN answers JSON;
    ALTER TABLE review_history ADD COLUMN answers JSON;
    """,
    # A pairwise judge of two slices of one job (core.schemas.JudgeLink): the field they
    # split, A's and B's value, what pairs match on. Links before it judge two whole jobs.
    """
    ALTER TABLE judge_links ADD COLUMN split VARCHAR DEFAULT '';
    ALTER TABLE judge_links ADD COLUMN split_values VARCHAR[] DEFAULT [];
    ALTER TABLE judge_links ADD COLUMN pair_on VARCHAR DEFAULT 'custom_id';
    """,
]


# A job's label as core.schemas.job_label makes it ("name · end-of-id", or the id), in SQL
# over results r joined with jobs j: charts grouped by job name their groups by it.
JOB_LABEL_SQL = (
    "CASE WHEN coalesce(j.name, '') = '' THEN r.job_id "
    "ELSE j.name || ' · ' || regexp_extract(r.job_id, '[^_]*$') END"
)

# Requests and results are parsed by DuckDB's JSON functions, not line by line in Python:
# ingest must keep up with the engine (20,000+ lines/s).
# Each line is parsed once into a struct (json_transform); fields are read from it.
RESULT_SHAPE = json.dumps(
    {
        "custom_id": "VARCHAR",
        "error": "JSON",
        "latency_ms": "INTEGER",
        "reused_from": {"job": "VARCHAR"},
        "response": {
            "status_code": "INTEGER",
            "body": {
                "object": "VARCHAR",
                "model": "VARCHAR",
                "created": "DOUBLE",
                "created_at": "DOUBLE",
                "status": "VARCHAR",
                "choices": [
                    {
                        "text": "VARCHAR",
                        "finish_reason": "VARCHAR",
                        "message": {
                            "content": "VARCHAR",
                            "tool_calls": [
                                {"function": {"name": "VARCHAR", "arguments": "VARCHAR"}}
                            ],
                        },
                    }
                ],
                "output": [{"content": [{"text": "VARCHAR"}]}],
                "data": [{"index": "INTEGER", "object": "VARCHAR", "score": "DOUBLE"}],
                "results": [{"index": "INTEGER", "relevance_score": "DOUBLE"}],
                "usage": {
                    "prompt_tokens": "INTEGER",
                    "completion_tokens": "INTEGER",
                    "input_tokens": "INTEGER",
                    "output_tokens": "INTEGER",
                },
            },
        },
    }
)
# An embedding's "answer" is what it holds, not the numbers: "384-d vector", or
# "3 × 384-d vectors" for a request of three inputs. The size is the job's (``vector_dims``,
# read from vector_jobs beside each line: its vectors are stored before its results row).
EMBEDDING_ANSWER_SQL = """
    CASE WHEN b.object = 'list' AND len(b.data) > 0 THEN
        CASE WHEN len(b.data) > 1 THEN len(b.data) || ' × ' ELSE '' END
        || coalesce(vector_dims || '-d ', '') || 'vector'
        || CASE WHEN len(b.data) > 1 THEN 's' ELSE '' END
    END"""
# A score line's "answer" is its scores; a rerank line's the documents' indexes, most
# relevant first, each with its score: "#2 0.8123, #0 0.4410".
SCORE_ANSWER_SQL = """
    CASE WHEN len(b.results) > 0 THEN array_to_string(list_transform(b.results, lambda ranked:
            '#' || ranked.index || ' ' || printf('%.4f', ranked.relevance_score)), ', ')
         WHEN b.data[1].object = 'score' THEN array_to_string(list_transform(b.data,
            lambda pair: printf('%.4f', pair.score)), ', ')
    END"""
RESULT_COLUMNS_SQL = f"""
    d.custom_id AS custom_id,
    CASE WHEN coalesce(json_type(d.error), 'NULL') = 'NULL'
         THEN 'succeeded' ELSE 'failed' END AS status,
    d.response.status_code AS status_code,
    coalesce(b.choices[1].message.content, b.choices[1].text,
             b.choices[1].message.tool_calls[1].function.arguments,
             b.output[1].content[1].text, {SCORE_ANSWER_SQL},
             {EMBEDDING_ANSWER_SQL}) AS answer,
    {tool_calls_sql("b.choices[1].message.tool_calls")} AS tool_calls,
    CASE WHEN b.object = 'response'
         THEN CASE WHEN b.status = 'incomplete' THEN 'length' ELSE 'stop' END
         ELSE b.choices[1].finish_reason END AS finish_reason,
    coalesce(b.usage.prompt_tokens, b.usage.input_tokens) AS prompt_tokens,
    coalesce(b.usage.completion_tokens, b.usage.output_tokens) AS completion_tokens,
    d.error->>'$.code' AS error_code,
    CASE WHEN json_type(d.error) = 'VARCHAR' THEN d.error->>'$'
         ELSE d.error->>'$.message' END AS error_message,
    raw::JSON AS raw,
    b.model AS model,
    to_timestamp(coalesce(b.created, b.created_at)) AS created_at,
    d.latency_ms AS latency_ms,
    d.reused_from.job AS reused_from
"""
REQUEST_SHAPE = json.dumps(
    {
        "custom_id": "VARCHAR",
        "body": {
            "model": "VARCHAR",
            "prompt": "VARCHAR",
            "input": "JSON",
            "query": "VARCHAR",
            "queries": "JSON",
            "messages": "JSON",
            "metadata": "JSON",
        },
    }
)
# The text a person reads (and searches) as "the prompt": the last user turn of the
# messages or of a Responses input list (text parts joined), a completions prompt, or an
# input string; an embeddings list of texts is its texts, one per line (token ids: none);
# a rerank (or one-query score) line's query.
REQUEST_COLUMNS_SQL = """
    coalesce(d.custom_id, 'line-' || line_no) AS custom_id,
    line_no,
    d.body.model AS model,
    coalesce(
        CASE json_type(user_content)
            WHEN 'ARRAY' THEN array_to_string(
                list_transform(json_extract(user_content, '$[*]'), lambda p: p->>'text'), '')
            ELSE user_content->>'$' END,
        d.body.prompt,
        CASE json_type(d.body.input)
            WHEN 'VARCHAR' THEN d.body.input->>'$'
            WHEN 'ARRAY' THEN nullif(array_to_string(list_transform(
                list_filter(json_extract(d.body.input, '$[*]'), lambda x: json_type(x) = 'VARCHAR'),
                lambda x: x->>'$'), chr(10)), '')
        END,
        d.body.query,
        CASE json_type(d.body.queries) WHEN 'VARCHAR' THEN d.body.queries->>'$' END
    ) AS prompt,
    coalesce(d.body.messages, d.body.input) AS messages,
    d.body.metadata AS metadata,
    d.body.metadata->>'$.prompt_version' AS prompt_version,
    CASE WHEN d IS NOT NULL THEN
        json_merge_patch(raw->'$.body', '{"messages": null, "metadata": null}') END AS params
"""
