"""A scoring bundle's function run in a separate, limited process: relative imports and data files work; an
exception, a time limit, a memory limit, a crash or a network call fails only its own sample; import problems are
reported by `check()` naming the module or function."""

from __future__ import annotations

import math
import os
import textwrap
import time
import zipfile
from pathlib import Path

import pytest

from optimize.core.errors import Invalid
from optimize.scoring import BundleRunner, Sample, Score, build_member

REWARD = '''
import json
import math
import os
import socket
import time
from pathlib import Path

from . import helpers

ANSWERS = json.loads((Path(__file__).parent / "tables" / "answers.json").read_text())


def compute_score(prompt_messages, completion_text, fields):
    print("the bundle's own output goes to stderr")
    if completion_text == "raise":
        raise ValueError("no answer found")
    if completion_text == "sleep":
        time.sleep(30)
    if completion_text == "exit":
        os._exit(3)
    if completion_text == "memory":
        hoard = bytearray(1024 * 1024 * 1024)
        return len(hoard)
    if completion_text == "network":
        socket.create_connection(("127.0.0.1", 9), timeout=1)
    if completion_text == "crash":
        import ctypes
        ctypes.string_at(0)
    if completion_text == "nan":
        return math.nan
    if completion_text == "text":
        return "high"
    if completion_text == "none":
        return None
    if completion_text == "bool":
        return True
    if completion_text == "where":
        return float(Path.cwd() == Path(__file__).parent and os.environ["HOME"] != fields["home"])
    if completion_text == "secrets":
        return float(len([key for key in os.environ if key.startswith("OPTIMIZE_")]))
    return helpers.grade(completion_text, fields["expected"], ANSWERS.get(fields.get("id")))
'''

HELPERS = '''
def grade(completion, expected, known):
    return float(completion.strip() == (expected or known))
'''

NESTED = '''
from .. import helpers


def score(prompt_messages, completion_text, fields):
    return helpers.grade(completion_text, fields["expected"], None) + len(prompt_messages)
'''


def write_bundle(root: Path) -> Path:
    files = {
        "reward.py": REWARD, "helpers.py": HELPERS, "tables/answers.json": '{"r7": "Oslo"}',
        "pkg/__init__.py": "", "pkg/nested.py": NESTED,
        "broken.py": "import json\nimport numpy_that_is_not_there\n",
        "broken_syntax.py": "def compute_score(:\n",
        "nothing.py": "def helper(a):\n    return a\n\nVALUE = 3\n",
        "twoargs.py": "def compute_score(completion, expected):\n    return 1.0\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    return root


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """The bundle as a ZIP, its files at the archive's root."""
    folder = write_bundle(tmp_path_factory.mktemp("bundle-src"))
    archive = tmp_path_factory.mktemp("bundle") / "rewards.zip"
    with zipfile.ZipFile(archive, "w") as out:
        for path in sorted(folder.rglob("*")):
            out.write(path, path.relative_to(folder).as_posix())
    return archive


@pytest.fixture(scope="module")
def runner(bundle):
    with BundleRunner(bundle, "reward", time_limit_s=0.5, memory_limit_mb=512) as running:
        yield running


def sample(completion: str, expected: str | None = "Paris", **fields) -> Sample:
    return Sample(prompt=[{"role": "user", "content": "Capital of France?"}], completion=completion,
                  expected=expected, fields=fields)


def test_a_bundle_scores_with_its_sibling_modules_and_data_files(runner):
    got = runner.score([sample(" Paris "), sample("Lyon"), sample("Oslo", None, id="r7"), sample("bool"),
                        sample("none")])
    assert got == [Score(1.0), Score(0.0), Score(1.0), Score(1.0), Score(None)]
    assert runner.isolation == "bubblewrap sandbox"


def test_a_dotted_module_from_a_folder(bundle, tmp_path):
    folder = write_bundle(tmp_path)
    with BundleRunner(folder, "pkg.nested:score", time_limit_s=5) as nested:
        assert nested.score([sample("Paris"), sample("Rome")]) == [Score(2.0), Score(1.0)]
        assert nested.digest and len(nested.digest) == 64


def test_an_exception_is_its_samples_error_located_in_the_bundle(runner):
    pid = runner.pid
    got = runner.score([sample("raise"), sample("Paris")])
    assert got[0].value is None
    line = REWARD.splitlines().index('        raise ValueError("no answer found")') + 1
    assert got[0].error == f"ValueError: no answer found (reward.py line {line})"
    assert got[1] == Score(1.0) and runner.pid == pid  # the process lives on


def test_returned_values_that_are_not_numbers_are_errors(runner):
    nan, text = runner.score([sample("nan"), sample("text")])
    assert nan == Score(None, "returned nan, not a finite number")
    assert text == Score(None, "returned a str, not a number (or None)")


def test_a_sample_past_the_time_limit_is_killed_and_the_next_one_scores(runner):
    pid = runner.pid
    started = time.monotonic()
    got = runner.score([sample("sleep"), sample("Paris")])
    assert time.monotonic() - started < 5
    assert got == [Score(None, "took longer than 0.5 s"), Score(1.0)]
    assert runner.pid != pid


def test_memory_past_the_limit_is_the_samples_error(runner):
    got = runner.score([sample("memory"), sample("Paris")])
    assert got[0].value is None and got[0].error.startswith("MemoryError: ran out of memory (the limit is 512 MiB)")
    assert got[1] == Score(1.0)


def test_a_process_that_dies_fails_its_sample_and_is_restarted(runner):
    starts = runner.starts
    got = runner.score([sample("exit"), sample("Paris"), sample("crash"), sample("Paris")])
    assert got[0] == Score(None, "the scoring process exited with code 3 while scoring this sample")
    assert got[2] == Score(None, "the scoring process was ended by SIGSEGV while scoring this sample")
    assert got[1] == got[3] == Score(1.0)
    assert runner.starts == starts + 2


def test_the_bundle_has_no_network(runner):
    got = runner.score([sample("network")])[0]
    assert got.value is None and "scoring bundles have no network" in got.error


def test_the_process_holds_no_secrets_and_works_in_the_bundle(bundle, monkeypatch):
    monkeypatch.setenv("OPTIMIZE_TOKEN", "secret")
    monkeypatch.setenv("OPTIMIZE_DATABASE_URL", "postgresql://user:pass@db/optimize")
    with BundleRunner(bundle, "reward:compute_score") as fresh:
        assert fresh.score([sample("secrets"), sample("where", home=str(Path.home()))]) == [Score(0.0), Score(1.0)]


def test_after_losing_the_process_on_samples_in_a_row_the_batch_gives_up(bundle):
    with BundleRunner(bundle, "reward", give_up_after=2) as fragile:
        got = fragile.score([sample("exit"), sample("Paris"), sample("exit"), sample("exit"), sample("Paris")])
        assert [g.value for g in got] == [None, 1.0, None, None, None]
        assert got[4].error.startswith("not scored: the scoring process was lost on 2 samples in a row (the last "
                                       "one the scoring process exited with code 3")
        assert fragile.score([sample("Paris")]) == [Score(1.0)]  # the next batch starts afresh


def test_close_stops_the_process_and_removes_the_copy(bundle):
    fresh = BundleRunner(bundle, "reward")
    assert fresh.score([sample("Paris")]) == [Score(1.0)]
    pid, workdir = fresh.pid, fresh._state.workdir
    fresh.close()
    assert not workdir.exists() and not fresh.running
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert fresh.score([sample("Paris")]) == [Score(1.0)] and fresh.starts == 2  # it can start again
    fresh.close()


def test_an_import_error_is_reported_by_check_naming_the_module(bundle):
    with pytest.raises(Invalid) as caught:
        BundleRunner(bundle, "broken").check()
    error = caught.value
    assert error.message == ("importing module broken of the scoring bundle rewards.zip failed: "
                             "ModuleNotFoundError: No module named 'numpy_that_is_not_there' (broken.py line 2)")
    assert error.details["trace"] == ["broken.py line 2, in <module>"]
    with pytest.raises(Invalid, match=r"failed: SyntaxError: invalid syntax \(broken_syntax.py line 1\)"):
        BundleRunner(bundle, "broken_syntax").check()


def test_a_missing_module_or_function_is_named(bundle):
    with pytest.raises(Invalid) as caught:
        with BundleRunner(bundle, "rewards"):
            pass
    assert caught.value.message == ("the scoring bundle rewards.zip has no module rewards: ModuleNotFoundError: "
                                    "No module named 'rewards'")
    assert "reward.py" in caught.value.hint and "pkg/" in caught.value.hint
    with pytest.raises(Invalid) as caught:
        BundleRunner(bundle, "nothing").check()
    assert caught.value.message == "module nothing of the scoring bundle rewards.zip has no function compute_score"
    assert caught.value.hint.startswith("it defines: helper;")
    with pytest.raises(Invalid, match=r"^nothing:VALUE of the scoring bundle rewards.zip is an int, not a function"):
        BundleRunner(bundle, "nothing:VALUE").check()
    with pytest.raises(Invalid, match=r"twoargs:compute_score .* cannot be called as fn\(prompt_messages, "):
        BundleRunner(bundle, "twoargs").check()
    with pytest.raises(Invalid, match=r"^function: 'reward\.py' names a file"):
        BundleRunner(bundle, "reward.py")


def test_an_unsafe_archive_is_refused(tmp_path):
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as out:
        out.writestr("../outside.py", "X = 1\n")
    with pytest.raises(Invalid, match="holds a path outside it: '../outside.py'"):
        BundleRunner(archive, "outside").check()
    folder = tmp_path / "linked"
    folder.mkdir()
    (folder / "reward.py").symlink_to("/etc/hostname")
    with pytest.raises(Invalid, match="holds 'reward.py', which is not a regular file"):
        BundleRunner(folder, "reward").check()
    (tmp_path / "plain.txt").write_text("not a zip")
    with pytest.raises(Invalid, match="is not a ZIP archive"):
        BundleRunner(tmp_path / "plain.txt", "reward").check()


def test_a_rule_member_runs_the_bundle_function(bundle):
    spec = {"kind": "rule", "name": "capital", "weight": 1.0, "bundle": "acme/rewards:v1", "function": "reward",
            "timeLimitSeconds": 0.5, "memoryLimitMb": 256}
    with build_member(spec, bundle) as member:
        member.check()
        got = member.score([sample("Paris"), sample("sleep")])
        assert got == [Score(1.0), Score(None, "took longer than 0.5 s")]
        assert not math.isnan(member.runner.time_limit_s) and member.runner.label == "acme/rewards:v1"
