"""Sample owners (issue 44): where sign-in is on, who drew a sample owns it, and only the
owner or an admin may change its schema, guidelines and queue or set final labels; a sample
with no recorded owner stays open to anyone until an admin names one; without sign-in, and
on the command line, nothing is refused."""

from __future__ import annotations

import getpass
import json

import pytest

from core.access import AccessConfig
from core.cli.main import main
from core.human import label_schemas as lsc
from core.human import owners as ow
from core.human.files import OWNERS, read_from
from core.store.results import ResultFilter
from core.store.samples import SampleDefinition, create_sample

ON = AccessConfig(sign_in=True, allowed_users=("@example.com",), admins=("Boss@example.com",))


def test_the_rule_owner_or_admin_where_sign_in_is_on_anyone_without_an_owner(tmp_path):
    ana, bob = ow.Who("ana@example.com"), ow.Who("bob@example.com")
    boss = ow.signed_in("boss@example.com", ON)
    assert boss.admin and not ow.signed_in("ana@example.com", ON).admin

    # no owner recorded (a sample drawn before owners, or without sign-in): anyone
    assert ow.change_refusal(tmp_path, "smp_1", bob, sign_in=True) is None

    ow.record_owner(tmp_path, "smp_1", "ana@example.com", by="ana@example.com")
    assert ow.owner_of(tmp_path, "smp_1") == "ana@example.com"
    assert ow.change_refusal(tmp_path, "smp_1", ana, sign_in=True) is None
    assert ow.change_refusal(tmp_path, "smp_1", ow.Who("ANA@example.com"), True) is None
    refused = ow.change_refusal(tmp_path, "smp_1", bob, sign_in=True)
    assert refused == (
        "Read-only: only this sample's owner (ana@example.com) or an admin may change its "
        "schema, guidelines and queue, or set final labels."
    )
    assert ow.change_refusal(tmp_path, "smp_1", boss, sign_in=True) is None
    assert ow.change_refusal(tmp_path, "smp_1", bob, sign_in=False) is None  # one user
    assert ow.change_refusal(tmp_path, "smp_1", ow.command_line(), sign_in=True) is None
    assert ow.owner_of(tmp_path, "smp_2") is None  # per sample

    # an admin names another owner: the latest line wins
    assert ow.set_owner_refusal(boss, sign_in=True) is None
    assert ow.set_owner_refusal(ana, sign_in=True) == "only an admin may name a sample's owner"
    ow.record_owner(tmp_path, "smp_1", "bob@example.com", by=boss.user)
    assert ow.change_refusal(tmp_path, "smp_1", bob, sign_in=True) is None
    assert ow.change_refusal(tmp_path, "smp_1", ana, sign_in=True) is not None


def test_without_sign_in_the_local_user_is_an_admin_and_a_bad_owner_is_refused(tmp_path):
    local = ow.signed_in(None, AccessConfig())
    assert local.admin
    assert not ow.signed_in(None, ON).admin  # signed in but no email: no admin rights
    for bad in ("", "   ", "a\nb", "x" * 321):
        with pytest.raises(ow.OwnerError):
            ow.record_owner(tmp_path, "smp_1", bad, by="boss")
    assert not (tmp_path / OWNERS).exists()  # nothing written


def test_a_sample_drawn_by_a_signed_in_user_records_its_owner(finished_store):
    store, job_id = finished_store
    definition = SampleDefinition(filter=ResultFilter(job_ids=[job_id]), size=2)
    mine = create_sample(store, "mine", definition, owner="ana@example.com")
    anyone = create_sample(store, "anyone", definition)
    assert ow.owner_of(store.human_dir, mine.sample_id) == "ana@example.com"
    assert ow.owner_of(store.human_dir, anyone.sample_id) is None
    records = read_from(store.human_dir / OWNERS, 0, 0).records
    assert [(r.sample_id, r.owner, r.by) for _, r in records] == [
        (mine.sample_id, "ana@example.com", "ana@example.com")
    ]


def test_the_cli_is_the_local_admin_it_sets_the_schema_of_an_owned_sample(
    studio_home, tmp_path, monkeypatch
):
    from core.config import data_paths
    from core.store.db import Store
    from tests.support.pages import job_in_home

    job_id = job_in_home(studio_home)
    store = Store(data_paths().database)
    store.ingest_all(data_paths().jobs)
    definition = SampleDefinition(filter=ResultFilter(job_ids=[job_id]), size=2)
    sample_id = create_sample(store, "owned", definition, owner="ana@example.com").sample_id
    store.close()
    # sign-in on, the sample another's: the command line still may (the data folder's own
    # user, an admin), through the page's rule
    monkeypatch.setattr("core.access.access_config", lambda files=None: ON)
    questions = tmp_path / "q.txt"
    questions.write_text("rating: Quality | 1..5\n", encoding="utf-8")
    assert main(["review", "schema", sample_id, "--questions", str(questions)]) == 0
    kept = lsc.schema_of(data_paths().human, sample_id)
    assert [q.title for q in kept.questions] == ["Quality"]


def _sample_in_home(studio_home, owner: str | None = None) -> tuple[str, str]:
    """A finished job in the data folder and a sample of it (owned by ``owner``)."""
    from core.config import data_paths
    from core.store.db import Store
    from tests.support.pages import job_in_home

    job_id = job_in_home(studio_home)
    store = Store(data_paths().database)
    store.ingest_all(data_paths().jobs)
    definition = SampleDefinition(filter=ResultFilter(job_ids=[job_id]), size=4)
    sample_id = create_sample(store, "owned", definition, owner=owner).sample_id
    store.close()
    return job_id, sample_id


def test_the_cli_shows_a_samples_owner_and_an_admin_names_one(studio_home, monkeypatch):
    from core.config import data_paths
    from tests.support.cli import cli

    _, sample_id = _sample_in_home(studio_home)
    owners = data_paths().human / OWNERS
    monkeypatch.setattr("core.access.access_config", lambda files=None: AccessConfig())
    done = cli("review", "owner", sample_id)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"sample {sample_id}: no owner recorded (anyone may change")
    # without sign-in there is one user: the page's rule refuses to name an owner
    done = cli("review", "owner", sample_id, "--set", "ana@example.com")
    assert done.returncode == 2
    assert done.stderr == "error: without sign-in there is one user, who owns every sample\n"
    assert not owners.exists()

    monkeypatch.setattr("core.access.access_config", lambda files=None: ON)
    done = cli("review", "owner", sample_id, "--set", " ana@example.com ")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"sample {sample_id}: owner ana@example.com\n"
    assert cli("review", "owner", sample_id).stdout == done.stdout
    done = cli("review", "owner", sample_id, "--json")
    assert json.loads(done.stdout) == {"sample_id": sample_id, "owner": "ana@example.com"}
    records = [r for _, r in read_from(owners, 0, 0).records]
    assert [(r.sample_id, r.owner, r.by) for r in records] == [
        (sample_id, "ana@example.com", getpass.getuser())  # the command line's user names it
    ]

    kept = owners.read_bytes()
    for bad in ("", "   ", "a\nb", "x" * 321):
        done = cli("review", "owner", sample_id, "--set", bad)
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
        assert owners.read_bytes() == kept  # nothing written
    done = cli("review", "owner", "nope", "--set", "bob@example.com")
    assert done.returncode == 2 and "no sample 'nope'" in done.stderr
    assert owners.read_bytes() == kept
    assert ow.owner_of(data_paths().human, sample_id) == "ana@example.com"


def test_the_cli_adjudicates_an_owned_sample_through_the_rule(studio_home, monkeypatch):
    from core.config import data_paths
    from core.store.db import Store
    from core.store.review import Label, save_label
    from tests.support.cli import cli

    job_id, sample_id = _sample_in_home(studio_home, owner="ana@example.com")
    store = Store(data_paths().database)
    save_label(store, job_id, "a", "ana@example.com", Label("pass", 4), sample_id)
    save_label(store, job_id, "a", "bob@example.com", Label("fail", 2), sample_id)
    store.close()
    monkeypatch.setattr("core.access.access_config", lambda files=None: ON)
    asked = []
    rule = ow.change_refusal

    def spy(folder, sample, who, sign_in):
        asked.append((sample, who, sign_in))
        return rule(folder, sample, who, sign_in)

    monkeypatch.setattr(ow, "change_refusal", spy)
    # sign-in on, the sample ana's: the command line (an admin) still sets the final label
    done = cli("review", "adjudicate", job_id, "a", "pass", "--by", "olga")
    assert done.returncode == 0, done.stderr
    assert "final label pass, adjudicated by olga" in done.stdout
    assert asked == [(sample_id, ow.command_line(), True)]  # the one rule was asked
    adjudications = data_paths().human / "adjudications.jsonl"
    kept = adjudications.read_bytes()

    # where the rule refuses, the command says why and writes nothing
    monkeypatch.setattr(ow, "change_refusal", lambda *a: "Read-only: not yours")
    done = cli("review", "adjudicate", job_id, "a", "fail", "--by", "olga")
    assert done.returncode == 2
    assert done.stderr == f"error: sample {sample_id}: Read-only: not yours\n"
    assert adjudications.read_bytes() == kept


def test_the_cli_adjudicates_the_item_of_the_sample_it_names(studio_home, monkeypatch):
    """``--sample``: the adjudication is that sample's item, its owner rule alone is
    asked, and the sample is kept with the final label; an unknown sample, or an item not
    in it, is refused in words with nothing written."""
    from core.config import data_paths
    from core.human.files import ADJUDICATIONS, AdjudicationRecord
    from core.store.db import Store
    from core.store.review import Label, save_label
    from tests.support.cli import cli

    job_id, whole = _sample_in_home(studio_home, owner="ana@example.com")  # a, b, c, d
    store = Store(data_paths().database)
    negatives = SampleDefinition(
        filter=ResultFilter(job_ids=[job_id], metadata={"label": "neg"}), size=4
    )
    neg = create_sample(store, "negatives", negatives, owner="bob@example.com").sample_id
    for cid in ("a", "b"):
        save_label(store, job_id, cid, "ana@example.com", Label("pass", 4), whole)
        save_label(store, job_id, cid, "bob@example.com", Label("fail", 2), whole)
    store.close()
    monkeypatch.setattr("core.access.access_config", lambda files=None: ON)
    asked = []

    def only_bobs(folder, sample, who, sign_in):  # the sample of all items refuses
        asked.append(sample)
        return None if sample == neg else "Read-only: not yours"

    monkeypatch.setattr(ow, "change_refusal", only_bobs)
    adjudications = data_paths().human / ADJUDICATIONS

    # without --sample, every sample holding b is asked, as before: the whole one refuses
    done = cli("review", "adjudicate", job_id, "b", "pass", "--by", "olga")
    assert done.returncode == 2
    assert done.stderr == f"error: sample {whole}: Read-only: not yours\n"
    # (it stops at the first refusal: neg is asked only where its id sorts first)
    assert whole in asked and set(asked) <= {whole, neg} and not adjudications.exists()

    # with --sample, only that sample's rule counts, and the sample is recorded
    asked.clear()
    done = cli("review", "adjudicate", job_id, "b", "pass", "--by", "olga", "--sample", neg)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{job_id} b (sample {neg}): final label pass, adjudicated by olga\n"
    assert asked == [neg]
    (line,) = read_from(adjudications, 0, 0).records
    record = line[1]
    assert isinstance(record, AdjudicationRecord)
    assert (record.custom_id, record.verdict, record.sample_id) == ("b", "pass", neg)
    kept = adjudications.read_bytes()

    # a names the whole sample's rule, which refuses it
    done = cli("review", "adjudicate", job_id, "a", "pass", "--by", "olga", "--sample", whole)
    assert done.returncode == 2
    assert done.stderr == f"error: sample {whole}: Read-only: not yours\n"
    # a is not in the negatives: refused in words, whatever the owner rule says
    asked.clear()
    done = cli("review", "adjudicate", job_id, "a", "pass", "--by", "olga", "--sample", neg)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        f"error: item {job_id} a is not in sample {neg}: adjudicate one of its items, "
        "or leave out --sample\n"
    )
    assert asked == []
    done = cli("review", "adjudicate", job_id, "b", "pass", "--by", "olga", "--sample", "nope")
    assert done.returncode == 2 and "no sample 'nope'" in done.stderr
    assert asked == [] and adjudications.read_bytes() == kept
