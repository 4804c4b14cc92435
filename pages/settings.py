"""Settings: where data and models live, the model folders found and the names mapped
to them, the engine's loaded models (with their idle time and an Unload button), the API's
keys and the quotas of keys and users, and the webhook endpoints told when a batch ends."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from core.api.keys import ApiAccess, read_access, write_access
from core.api.keys import read_keys as api_keys
from core.check.sensitive import (
    POLICIES,
    PolicyProblem,
    owner_policies_text,
    phone_regions,
    read_policy,
    region_label,
    save_owner_policies,
    save_studio,
)
from core.config import DataPaths, default_model_dir, models_dir
from core.devices import gpu_count
from core.jobs.approval import ApprovalProblem, check_settings
from core.jobs.approval import read_settings as read_approval
from core.jobs.approval import save_settings as save_approval
from core.jobs.engine_files import (
    BUDGET_ENV,
    IDLE_ENV,
    RUNNING_ENV,
    EngineCommand,
    EngineState,
    answer_lines,
    ask_engine,
    describe,
    idle_override,
    idle_seconds,
    memory_override,
    read_settings,
    read_state,
    running_override,
    write_settings,
)
from core.jobs.folder import local_owner
from core.jobs.quotas import LIMITS, Quota, QuotaProblem, quota_of, read_quotas, set_quota
from core.jobs.windows import WindowProblem, check_form, local_zone, owners_text
from core.jobs.windows import read_settings as read_windows
from core.jobs.windows import save_settings as save_windows
from core.model_folders import is_model_folder, model_folders, model_kind
from core.model_names import (
    add_adapter,
    folder_choices,
    names_from_rows,
    names_problem,
    read_names,
    write_names,
)
from core.webhooks.outbox import delivery_log
from core.webhooks.registry import (
    EVENT_TYPES,
    WebhookProblem,
    add_endpoint,
    read_endpoints,
    remove_endpoint,
    rotate_secret,
)
from ui.sign_in import access_now, signed_in_user
from ui.store import paths, through_app
from ui.text import escape

MODELS_HELP = (
    "Put any Hugging Face model folder (config, weights, tokenizer) under the models "
    "folder to see it here, or give its path on the Run page. A cross-encoder (a reranker "
    "saved as a sequence classifier of one label) serves score and rerank lines that name "
    "it; an embedding model serves them too, as a bi-encoder."
)
KEYS_HELP = (
    "OpenAI clients call this server's `/v1` (Files, Batches, Models). Beyond this machine "
    "they need a key: `python -m core keys create NAME` prints one once (only its hash is "
    "kept), `keys revoke NAME` removes it. A key sees only its own files and batches, "
    "wherever it calls from; an unknown or revoked key is refused. A call with no key from "
    "this machine sees everything, unless keys are required here too."
)
LOOPBACK_HELP = (
    "Anything that forwards remote traffic to 127.0.0.1 (an SSH tunnel, a port-forward) "
    "calls from this machine: require keys here so such a call sees only its key's work. "
    "Same as `python -m core keys loopback require` (`open` turns it off)."
)


def folders_section(data: DataPaths) -> None:
    """Where the studio keeps its files, and how to move them."""
    st.subheader("Folders")
    st.dataframe(
        pd.DataFrame(
            [
                {"what": "Data folder (BATCH_STUDIO_HOME)", "path": str(data.home)},
                {"what": "Jobs", "path": str(data.jobs)},
                {"what": "Uploads", "path": str(data.uploads)},
                {"what": "DuckDB index", "path": str(data.database)},
                {"what": "Models folder (BATCH_STUDIO_MODELS)", "path": str(models_dir())},
            ]
        ),
        hide_index=True,
        width="stretch",
    )
    st.caption("Set the environment variables before `make run` to move these folders.")


def models_section() -> None:
    """The GPUs, and each model folder found: ready or not, what it serves."""
    st.subheader("Models")
    gpus = gpu_count()
    st.write(
        f"{gpus} GPU(s) found." if gpus else "No GPU found: jobs run on the CPU build of vLLM."
    )
    rows = [
        {
            "model": f.name,
            "folder": str(f),
            "ready": is_model_folder(f),
            "serves": model_kind(f) if is_model_folder(f) else "",
            "built-in": f == default_model_dir(),
        }
        for f in model_folders()
    ]
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    if not is_model_folder(default_model_dir()):
        st.warning(
            "The built-in model is not prepared yet: run `make setup` (or "
            "`python -m core models prepare`)."
        )
    st.caption(MODELS_HELP)


def model_names_section() -> None:
    """The names a batch line's ``body.model`` may use, edited in a table and saved."""
    st.markdown("**Model names**: a batch line's `body.model` naming one runs on its folder")
    st.caption(
        "Each folder answers to its own name too; any other name runs on the job's model. "
        "The Batch API (`GET /v1/models`), `core check`, `core run`, the inbox and Upload & "
        "check all use these names."
    )
    names_problem_now = names_problem()
    if names_problem_now:
        st.warning(names_problem_now)
    by_name = folder_choices()  # model folders and LoRA adapters
    ready = list(by_name)
    kept_names = pd.DataFrame(
        [{"name": n, "model": Path(f).name} for n, f in read_names().items()],
        columns=["name", "model"],
    )
    edited = st.data_editor(
        kept_names,
        num_rows="dynamic",
        hide_index=True,
        column_config={
            "name": st.column_config.TextColumn("name (e.g. gpt-4o-mini)", required=True),
            "model": st.column_config.SelectboxColumn("runs on", options=ready, required=True),
        },
        key="model_names",
    )
    if st.button("Save model names", key="save_model_names"):
        rows_now = edited.dropna(how="all").to_dict("records")
        try:
            write_names(names_from_rows(rows_now, by_name))
            st.success(f"{len(rows_now)} model name(s) kept.")
        except ValueError as exc:
            st.error(f"Not saved: {escape(exc)}.")
    add_adapter_form()


ADAPTER_HELP = (
    "A fine-tune saved by peft (`adapter_config.json` + `adapter_model.safetensors`). It is "
    "checked against the base (the modules it changes and their shapes) and kept under the "
    "name: a line whose `body.model` is that name runs on the base's engine with the "
    "adapter, and its answer carries the name. Same as `python -m core models add-adapter "
    "NAME FOLDER --base BASE`."
)
ADDED = "settings_adapter_added"  # said once, after the page is drawn again with the name


def add_adapter_form() -> None:
    """A name for a LoRA adapter folder on a base model folder, checked and kept by the
    same function as ``core models add-adapter``; its refusal shown as plain text."""
    st.markdown("**Add a LoRA adapter**: a fine-tune that answers to a name of its own")
    if ADDED in st.session_state:
        st.success(escape(st.session_state.pop(ADDED)), icon=":material/check:")
    bases = [f for f in model_folders() if is_model_folder(f) and model_kind(f) == "chat"]
    with st.form("add_adapter", clear_on_submit=False, border=False):
        c = st.columns([2, 3, 2])
        name = c[0].text_input(
            "Name", placeholder="ft:gpt-4o-mini:acme::support", key="adapter_name"
        )
        folder = c[1].text_input(
            "Adapter folder", placeholder="/path/to/adapter", key="adapter_folder"
        )
        base = c[2].selectbox("Base model", [str(f) for f in bases],
                              format_func=lambda f: Path(f).name, key="adapter_base")  # fmt: skip
        added = st.form_submit_button("Add adapter", help=ADAPTER_HELP)
    if added:
        try:
            adapter = add_adapter(name, folder, base or "")
        except ValueError as exc:
            st.error(f"Not added: {escape(exc)}.", icon=":material/block:")
        else:
            st.session_state[ADDED] = (
                f"{adapter.name}: LoRA adapter {adapter.folder} (rank {adapter.rank}) on "
                f"{Path(adapter.base).name}."
            )
            st.rerun()  # the names table above shows it


STOPPING = "settings_engine_stopping"  # the pid of the worker asked to stop from this page
STOPPED = "settings_engine_stopped"  # said once, when it has
STOP_SAID = "settings_engine_stop_said"  # the worker's answer to the stop, while it stops
ANSWER_SECONDS = 1.5  # how long a button waits for the worker's answer (it polls every 0.1 s)


def engine_section(home: Path) -> None:
    """The resident engine: how long it keeps models loaded, and what it holds now (drawn
    again every 2 s while it stops, until it has)."""
    st.subheader("Engine")
    idle_time(home)
    memory_budget(home)
    running_jobs(home)
    stopping = st.session_state.get(STOPPING) is not None
    st.fragment(engine_now, run_every=2.0 if stopping else None)(home)


def engine_now(home: Path) -> None:
    """What the engine holds, with its buttons; while it stops, that it does, and no button."""
    engine_state = read_state(home)
    stopping = st.session_state.get(STOPPING)
    if stopping is not None and engine_state is not None and engine_state.pid == stopping:
        said = st.session_state.get(STOP_SAID) or (
            f"worker pid {stopping} unloads every model and exits (after the job it runs now, "
            "if any)"
        )
        st.info(f"Stopping the engine: {escape(said)}…", icon=":material/hourglass_top:")
        st.write(describe(engine_state)[0])
        return
    if stopping is not None:  # gone: the whole page again, without the timer
        del st.session_state[STOPPING]
        st.session_state.pop(STOP_SAID, None)
        st.session_state[STOPPED] = f"The engine stopped: worker pid {stopping} has exited."
        st.rerun()
    if STOPPED in st.session_state:
        st.success(st.session_state.pop(STOPPED), icon=":material/check:")
    for line in describe(engine_state)[:1]:
        st.write(line)
    if engine_state is not None:
        loaded_models(home, engine_state)


def idle_time(home: Path) -> None:
    """How long models stay loaded after the last job, unless ``core serve`` set it."""
    override = idle_override()
    idle = st.number_input(
        "Keep models loaded after the last job (seconds)",
        min_value=0,
        value=int(idle_seconds(home)),
        step=60,
        disabled=override is not None,
        help="The next job on a loaded model then starts at once; 0 frees the memory at once.",
    )
    if override is not None:
        st.caption(f"Set by `core serve --engine-idle` ({IDLE_ENV}={override:g}).")
    elif idle != (saved := read_settings(home)).idle_seconds:
        write_settings(home, saved.model_copy(update={"idle_seconds": idle}))
        st.toast(f"Models now stay loaded {idle} s after the last job.")


def memory_budget(home: Path) -> None:
    """What the loaded models may hold together, unless the environment sets it: the
    running worker reads it at its next load."""
    override = memory_override()
    saved = read_settings(home)
    mib = st.number_input(
        "Memory the loaded models may hold together (MiB, 0: no cap)",
        min_value=0,
        value=int(override if override is not None else saved.memory_mib),
        step=256,
        disabled=override is not None,
        help="A model that does not fit beside the loaded ones unloads the least recently "
        "used first; the machine's free memory caps them too.",
    )
    if override is not None:
        st.caption(f"Set by the environment ({BUDGET_ENV}={override:g}).")
    elif mib != saved.memory_mib:
        write_settings(home, saved.model_copy(update={"memory_mib": mib}))
        st.toast(f"The loaded models may now hold {mib:,} MiB together." if mib else
                 "The loaded models are capped by the machine's free memory only.")  # fmt: skip


def running_jobs(home: Path) -> None:
    """How many jobs share the engine at most, unless the environment sets it."""
    override = running_override()
    saved = read_settings(home)
    count = st.number_input(
        "Jobs running side by side at most",
        min_value=1,
        value=override if override is not None else saved.running_jobs,
        step=1,
        disabled=override is not None,
        help="Jobs on loaded models share the engine by weight, so a small job finishes "
        "while a long one runs; 1 runs them one after another. The running worker reads "
        "it before it starts each job.",
    )
    if override is not None:
        st.caption(f"Set by the environment ({RUNNING_ENV}={override}).")
    elif count != saved.running_jobs:
        write_settings(home, saved.model_copy(update={"running_jobs": int(count)}))
        st.toast(f"Up to {count} jobs now run side by side.")


def loaded_models(home: Path, engine_state: EngineState) -> None:
    """Each model the engine holds (and the running jobs that use it), with an Unload button;
    a button that stops it all. Each says what the worker did (core.run.resident's rule)."""
    for loaded in engine_state.models:
        c = st.columns([3, 2, 2, 1])
        users = f" — in use by {escape(', '.join(loaded.job_ids))}" if loaded.job_ids else ""
        c[0].write(f"**{escape(loaded.name)}** ({loaded.kind}){users}")
        c[1].write(f"{loaded.memory_mib:,.0f} MiB")
        c[2].write(f"loaded in {loaded.load_seconds:.1f} s")
        if c[3].button("Unload", key=f"unload-{loaded.model}"):
            command = EngineCommand(action="unload", model=loaded.model)
            answer = ask_engine(home, command, ANSWER_SECONDS)
            st.toast(
                escape("; ".join(answer_lines(answer)))
                if answer is not None
                else f"Unloading {escape(loaded.name)} when the job the worker runs now ends."
            )
    if st.button(
        "Stop the engine",
        help="The worker starts no new job, lets the running ones finish, then unloads every "
        "model and exits; queued jobs wait for the next worker.",
    ):
        answer = ask_engine(home, EngineCommand(action="stop"), ANSWER_SECONDS)
        if answer is not None and answer.running:
            st.session_state[STOP_SAID] = "; ".join(answer_lines(answer))
        st.session_state[STOPPING] = engine_state.pid
        st.rerun()  # said at once, and no second Stop while it stops


def api_keys_section(home: Path) -> None:
    """The Batch API's keys, by name and first characters, never the key."""
    st.subheader("API keys")
    keys = api_keys(home)
    if keys:
        st.dataframe(
            pd.DataFrame(
                [
                    {"name (owner)": k.name, "key starts": f"{k.hint}…", "created": k.created_at}
                    for k in keys
                ]
            ),
            hide_index=True,
            width="stretch",
        )
    else:
        st.write("No API keys: the Batch API (`/v1`) answers only callers on this machine.")
    required = read_access(home).keys_on_loopback
    wanted = st.checkbox(
        "Require a key on this machine too", value=required, help=LOOPBACK_HELP, key="keys_here"
    )
    if wanted != required:
        write_access(home, ApiAccess(keys_on_loopback=wanted))
        st.toast(
            "The API now needs a key from this machine too."
            if wanted
            else "The API now answers a call with no key from this machine."
        )
    st.caption(KEYS_HELP)


QUOTAS_HELP = (
    "A job beyond its owner's quota is not made: the API answers 429, Run and `core run` "
    "say which limit and when it frees. Running jobs count the queued ones; queued lines "
    "are the lines of those jobs not yet answered; tokens per day are the prompt and "
    "completion tokens computed in the last 24 hours. 0: no limit. Also `python -m core "
    "keys quota`."
)
LIMIT_LABELS = {
    "running_jobs": "Running jobs",
    "queued_lines": "Queued lines",
    "tokens_per_day": "Tokens per day",
}


def quotas_section(home: Path) -> None:
    """Each key's or user's limits: the quotas kept, and a form to set one owner's."""
    st.subheader("Quotas")
    try:
        quotas = read_quotas(home)
    except QuotaProblem as exc:
        st.error(escape(str(exc)), icon=":material/error:")
        return
    you = local_owner(signed_in_user())
    owners = {f"you ({you.removeprefix('user:')})": you}
    owners |= {f"key {k.name}": f"key:{k.identity}" for k in api_keys(home)}
    others = [o for o in quotas if o.startswith("user:") and o != you]  # signed-in users
    owners |= {f"user {o.removeprefix('user:')}": o for o in others}
    named = {owner: label for label, owner in owners.items()}
    if quotas:
        st.dataframe(
            pd.DataFrame(
                [
                    {"owner": named.get(o, o)} | {LIMIT_LABELS[n]: getattr(q, n) for n in LIMITS}
                    for o, q in quotas.items()
                ]
            ),
            hide_index=True,
            width="stretch",
        )
    label = st.selectbox("Quota of", list(owners), key="quota_owner")
    owner = owners[label]
    quota = quota_of(home, owner)
    columns = st.columns(len(LIMITS))
    given = {
        name: column.number_input(
            LIMIT_LABELS[name],
            min_value=0,
            value=getattr(quota, name) or 0,
            step=1,
            key=f"quota_{name}_{owner}",
        )
        for name, column in zip(LIMITS, columns, strict=True)
    }
    if st.button("Save quota"):
        set_quota(home, owner, Quota(**{n: int(v) or None for n, v in given.items()}))
        st.toast(f"Quota of {label} saved.")
        st.rerun()
    st.caption(QUOTAS_HELP)


WEBHOOKS_HELP = (
    "When a batch ends (from Run, the CLI, the inbox or the API), each endpoint that wants "
    "the event is POSTed OpenAI's event (`batch.completed`, ...), signed per Standard "
    "Webhooks: verify it with the openai SDK's `client.webhooks.unwrap(body, headers, "
    "secret=...)`. A failed delivery is retried for up to 72 h; a job never waits for it. "
    "Also `python -m core webhooks add URL`."
)


def _show_secret(text: str, secret: str) -> None:
    st.success(text, icon=":material/key:")
    st.code(secret, language=None)


def webhooks_section(home: Path) -> None:
    """The webhook endpoints (never their secrets, but once when made), a form to add one,
    Rotate and Remove, and the delivery log."""
    st.subheader("Webhooks")
    endpoints = read_endpoints(home)
    if endpoints:
        st.dataframe(
            pd.DataFrame(
                [
                    {"id": e.id, "URL": e.url, "events": ", ".join(e.events), "added": e.created_at}
                    for e in endpoints
                ]
            ),
            hide_index=True,
            width="stretch",
        )
    else:
        st.write("No webhook endpoints: nothing is told when a batch ends.")
    url = st.text_input("Endpoint URL", key="webhook_url", placeholder="https://...")
    events = st.multiselect("Events", EVENT_TYPES, default=EVENT_TYPES, key="webhook_events")
    if st.button("Add endpoint"):
        try:
            added = add_endpoint(home, url, events)
        except WebhookProblem as exc:
            st.error(escape(str(exc)), icon=":material/error:")
        else:
            _show_secret(f"Endpoint {added.id} added. Its secret, shown only now:", added.secret)
    if endpoints:
        chosen = st.selectbox("Endpoint", [e.id for e in endpoints], key="webhook_chosen")
        rotate, remove = st.columns(2)
        if rotate.button("Rotate secret"):
            new = rotate_secret(home, chosen)
            _show_secret(
                f"New secret of {chosen}, shown only now (the old one signs 24 h):", new.secret
            )
        if remove.button("Remove endpoint"):
            remove_endpoint(home, chosen)
            st.toast(f"Endpoint {chosen} removed.")
            st.rerun()
    st.caption(WEBHOOKS_HELP)
    rows = delivery_log(home)
    if rows:
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    else:
        st.caption("No webhook deliveries yet.")


APPROVAL_HELP = (
    "A job over a threshold is made but does not run: it waits, awaiting approval, until "
    "a person allowed to approve approves it (it is queued) or rejects it (it ends failed "
    "with the reason) on Jobs, or with `python -m core approve JOB` / `reject JOB --why`. "
    "Tokens and cost are the estimate of Upload & check; a figure that cannot be estimated "
    "(no tokenizer, no price) counts as over. Empty: no threshold. Where sign-in is on, the "
    "admins ([access] admins) and the approvers named here decide; without it, this "
    "machine's user."
)


def approval_section(home: Path) -> None:
    """The thresholds over which a job waits for a person, and who may approve it."""
    st.subheader("Approval for big jobs")
    try:
        kept = read_approval(home)
    except ApprovalProblem as exc:
        st.error(escape(str(exc)), icon=":material/error:")
        return
    c = st.columns(3)
    lines = c[0].number_input("Lines over", value=kept.lines, step=1, key="approve_lines")
    tokens = c[1].number_input(
        "Estimated tokens over", value=kept.tokens, step=1000, key="approve_tokens"
    )
    cost = c[2].number_input(
        "Estimated cost over", value=kept.cost, step=1.0, format="%.2f", key="approve_cost"
    )
    approvers = st.text_input(
        "Approvers (emails, comma-separated)",
        ", ".join(kept.approvers),
        key="approvers",
        help="Each must be a user the sign-in allow-list lets in.",
    )
    if st.button("Save approval settings", key="save_approval"):
        try:
            settings = check_settings(
                access_now(),
                lines=lines,
                tokens=tokens,
                cost=cost,
                approvers=approvers.split(","),
            )
        except ApprovalProblem as exc:
            st.error(f"Not saved: {escape(str(exc))}.", icon=":material/block:")
        else:
            save_approval(home, settings)
            st.toast("Approval settings saved.")
            st.rerun()
    st.caption(APPROVAL_HELP)


WINDOWS_HELP = (
    "Run windows are the weekly hours jobs may run in, e.g. `weekdays 20:00-07:00, weekends "
    "all day` (days: daily, weekdays, weekends, mon..sun, mon-fri; hours HH:MM-HH:MM or all "
    "day). Outside them a job waits, queued, and starts by itself when one opens (a job "
    "already running runs on to its end). A job's own windows (Run, `core run "
    "--windows`, the Batch API's `run_window` metadata) come first, then its owner's here (a "
    "user's or an API key's name; also `python -m core keys windows NAME WINDOWS`), then the "
    "default. Empty: any time."
)


def windows_section(home: Path) -> None:
    """The studio's time zone and its default run windows, the studio's and per owner."""
    st.subheader("Run windows")
    try:
        kept = read_windows(home)
    except WindowProblem as exc:
        st.error(escape(str(exc)), icon=":material/error:")
        return
    c = st.columns(2)
    zone = c[0].text_input(
        "Time zone",
        kept.zone or "",
        placeholder=f"this machine's: {local_zone()}",
        key="windows_zone",
        help="An IANA name (Europe/Paris, America/New_York, UTC); empty: this machine's.",
    )
    default = c[1].text_input(
        "Default run windows",
        kept.default,
        placeholder="any time",
        key="windows_default",
    )
    owners = st.text_area(
        "Owners' default run windows (one NAME = WINDOWS a line)",
        owners_text(kept),
        key="windows_owners",
        placeholder="alice = weekdays 20:00-07:00, weekends all day",
    )
    if st.button("Save run windows", key="save_windows"):
        try:
            settings = check_form(zone, default, owners)
        except WindowProblem as exc:
            st.error(f"Not saved: {escape(str(exc))}.", icon=":material/block:")
        else:
            save_windows(home, settings)
            st.toast("Run windows saved.")
            st.rerun()
    st.caption(WINDOWS_HELP)


SENSITIVE_HELP = (
    "The check looks in every prompt for e-mail addresses, phone numbers, payment card "
    "numbers, IBANs, IP addresses and credentials. allow: no scan; warn: the check lists "
    "them (masked) and the file runs; refuse: Upload & check, core check, Run and the "
    "Batch API refuse the file, naming the lines; redact: the check lists them and the "
    "engine reads each as a placeholder such as [EMAIL_1] (the file on disk stays as "
    "given; each output line with one says how many it had, by kind). Also "
    "`python -m core sensitive POLICY --region XX`."
)


def sensitive_section(home: Path) -> None:
    """The studio's policy for sensitive data in prompts."""
    st.subheader("Sensitive data")
    try:
        kept = read_policy(home).policy
    except PolicyProblem as exc:
        st.error(escape(str(exc)), icon=":material/error:")
        kept = "warn"
    policy = st.radio(
        "Policy", POLICIES, index=POLICIES.index(kept), horizontal=True, key="sensitive"
    )
    if policy != kept and st.button("Save policy", key="save_sensitive"):
        save_studio(home, policy=policy)
        st.toast(f"Sensitive data: {policy}.")
        st.rerun()
    st.caption(SENSITIVE_HELP)
    region_section(home)
    owners_section(home)


def region_section(home: Path) -> None:
    """The region phone numbers written without a +country code are read as."""
    try:
        kept = read_policy(home).phone_region
    except PolicyProblem:
        return  # said above; saving the studio's policy mends the file
    regions = list(phone_regions())
    region = st.selectbox(
        "Phone numbers without a country code are read as region",
        regions,
        index=regions.index(kept),
        format_func=region_label,
        help="A number written without +country code (030 12345678, 01 23 45 67 89) is "
        "found, and redacted, by this region's numbering rules; one with a + code is read "
        "by its own. The check's report says which region it assumed.",
        key="phone_region",
    )
    if region != kept and st.button("Save region", key="save_phone_region"):
        try:
            save_studio(home, phone_region=region)
        except PolicyProblem as exc:
            st.error(f"Not saved: {escape(str(exc))}.", icon=":material/block:")
        else:
            st.toast(f"Phone numbers without a country code: {region_label(region)}.")
            st.rerun()


def owners_section(home: Path) -> None:
    """The owners' (API keys', users') own policies, where they differ from the studio's."""
    try:
        shown = owner_policies_text(read_policy(home))
    except PolicyProblem:
        return  # said above; saving the studio's policy mends the file
    text = st.text_area(
        "Owners' own policies (one NAME = POLICY a line)",
        value=shown,
        help="An API key's or a user's name and the policy its batches are checked and run "
        "under, e.g. `alice = redact`; an owner not listed has the studio's. Also "
        "`python -m core keys sensitive NAME POLICY`.",
        key="sensitive_owners",
    )
    if text != shown and st.button("Save owners' policies", key="save_sensitive_owners"):
        try:
            save_owner_policies(home, text)
        except PolicyProblem as exc:
            st.error(f"Not saved: {escape(str(exc))}.", icon=":material/block:")
        else:
            st.toast("Owners' policies saved.")
            st.rerun()


def job_rules(home: Path) -> None:
    """What a job must pass or wait for: approval, its run windows, sensitive data."""
    approval_section(home)
    windows_section(home)
    sensitive_section(home)


through_app()
st.title("Settings")
data = paths()
folders_section(data)
models_section()
model_names_section()
engine_section(data.home)
api_keys_section(data.home)
quotas_section(data.home)
webhooks_section(data.home)
job_rules(data.home)
