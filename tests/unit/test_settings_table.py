"""The table of `OPTIMIZE_*` settings (core/environment.py): parsing and bounds of each kind, refusals that name the
variable, its value and what is allowed in one line, masking of secrets, the generated settings page, and two
sweeps of `src/`: no `OPTIMIZE_*` variable is read around the table, and none is named that the table lacks."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from optimize.core.environment import (
    MASK,
    SETTINGS,
    MalformedSetting,
    Setting,
    check_all,
    declared,
    is_set,
    listing,
    setting,
)
from optimize.core.errors import Invalid
from optimize.core.setting_kinds import Choice, FilePath, Flag, JsonObject, Listing, Number, Whole
from optimize.core.settings_page import render

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "optimize"
NAMES = {entry.name for entry in SETTINGS}


# --- the table itself --------------------------------------------------------------------------------------------

def test_every_setting_is_declared_once_with_a_default_its_own_kind_accepts_and_a_one_sentence_meaning():
    assert len(NAMES) == len(SETTINGS)
    for entry in SETTINGS:
        assert re.fullmatch(r"OPTIMIZE_[A-Z0-9_]+", entry.name), entry.name
        assert entry.default is None or entry.default_value is not None, entry.name  # the default parses
        assert entry.default is not None or entry.unset, f"{entry.name}: say what takes the place of no default"
        assert entry.meaning.endswith((".", ")")) and entry.meaning[0].isupper(), entry.name
        assert set(entry.read_by.split(", ")) <= {"server", "worker", "cli"}, entry.name
    assert {entry.name for entry in SETTINGS if entry.secret} == {"OPTIMIZE_DATABASE_URL", "OPTIMIZE_LEASE_TOKEN",
                                                                  "OPTIMIZE_SHARED_LEASES", "OPTIMIZE_TOKEN"}


def test_unset_and_blank_variables_take_the_default():
    assert setting("OPTIMIZE_LEASE_SECONDS", {}) == 60.0
    assert setting("OPTIMIZE_LEASE_SECONDS", {"OPTIMIZE_LEASE_SECONDS": "  "}) == 60.0
    assert setting("OPTIMIZE_HOME", {}) == Path.home() / ".optimize"
    assert setting("OPTIMIZE_BLOB_STORE", {}) is None
    assert not is_set("OPTIMIZE_LEASE_SECONDS", {"OPTIMIZE_LEASE_SECONDS": ""})
    assert is_set("OPTIMIZE_LEASE_SECONDS", {"OPTIMIZE_LEASE_SECONDS": "5"})


def test_a_name_the_table_lacks_is_a_mistake_in_the_asking_code():
    with pytest.raises(KeyError, match="OPTIMIZE_NOPE is not a declared setting"):
        setting("OPTIMIZE_NOPE")


# --- kinds: parsing and bounds -----------------------------------------------------------------------------------

def test_whole_numbers_and_their_bounds():
    assert Whole().parse("3") == 3 and Whole(zero_allowed=True).parse("0") == 0
    for text in ("0", "-1", "1.5", "1e9", "many"):
        with pytest.raises(ValueError):
            Whole().parse(text)
    with pytest.raises(ValueError):
        Whole(zero_allowed=True).parse("-1")
    assert Whole().allowed() == "a whole number above 0"
    assert Whole(zero_allowed=True).allowed() == "a whole number of at least 0"


def test_numbers_are_finite_and_within_their_bounds():
    seconds = Number("a number of seconds")
    assert seconds.parse("0.25") == 0.25 and seconds.parse("1e3") == 1000.0
    for text in ("0", "-2", "nan", "inf", "-inf", "soon"):
        with pytest.raises(ValueError):
            seconds.parse(text)
    assert Number(zero_allowed=True).parse("0") == 0.0
    assert seconds.allowed() == "a number of seconds above 0" and seconds.show(600.0) == "600"


def test_flags_choices_lists_paths_and_json():
    assert [Flag().parse(word) for word in ("1", "TRUE", "yes", "On", "0", "false", "NO", "off")] == \
        [True] * 4 + [False] * 4
    with pytest.raises(ValueError):
        Flag().parse("maybe")
    assert Choice(("local", "ray")).parse("ray") == "ray"
    with pytest.raises(ValueError):
        Choice(("local", "ray")).parse("Ray")
    assert Listing(",", lower=True).parse("A.example:80, ,b") == ("a.example:80", "b")
    roots = Listing(os.pathsep, paths=True).parse(f"~/x{os.pathsep}{os.pathsep}/tmp/../y")
    assert roots == (Path.home().resolve() / "x", Path("/y"))
    assert FilePath().parse("~/f") == Path.home() / "f"
    assert JsonObject("a to b").parse('{"a": 1}') == {"a": 1}
    with pytest.raises(ValueError, match="is not JSON"):
        JsonObject("a to b").parse("{")
    with pytest.raises(ValueError, match="must map a to b"):
        JsonObject("a to b").parse("[1]")


def test_typed_values_come_back_through_the_table():
    env = {"OPTIMIZE_LEASE_SECONDS": "5", "OPTIMIZE_MAX_SHARDS": " 7 ", "OPTIMIZE_WARM_WORKERS": "off",
           "OPTIMIZE_EXECUTOR": "ray", "OPTIMIZE_OUTBOUND_HOSTS": "Grader.example:8080,other",
           "OPTIMIZE_PROJECT_QUOTAS": '{"demo": {"openRuns": 5}}'}
    assert setting("OPTIMIZE_LEASE_SECONDS", env) == 5.0
    assert setting("OPTIMIZE_MAX_SHARDS", env) == 7
    assert setting("OPTIMIZE_WARM_WORKERS", env) is False and setting("OPTIMIZE_WARM_WORKERS", {}) is True
    assert setting("OPTIMIZE_EXECUTOR", env) == "ray"
    assert setting("OPTIMIZE_OUTBOUND_HOSTS", env) == ("grader.example:8080", "other")
    assert setting("OPTIMIZE_PROJECT_QUOTAS", env) == {"demo": {"openRuns": 5}}


# --- refusals ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "text", "message"), [
    ("OPTIMIZE_LEASE_SECONDS", "soon", "OPTIMIZE_LEASE_SECONDS='soon' is not a number of seconds above 0"),
    ("OPTIMIZE_MAX_CONNECTIONS", "-1", "OPTIMIZE_MAX_CONNECTIONS='-1' is not a whole number of at least 0"),
    ("OPTIMIZE_EXECUTOR", "k8s", "OPTIMIZE_EXECUTOR='k8s' is not one of local, ray"),
    ("OPTIMIZE_UNSANDBOXED_BUNDLES", "maybe",
     "OPTIMIZE_UNSANDBOXED_BUNDLES='maybe' is not one of 1, true, yes, on, 0, false, no, off"),
    ("OPTIMIZE_QUOTA_OPEN_RUNS", "many", "OPTIMIZE_QUOTA_OPEN_RUNS must be a whole number of at least 0, not 'many'"),
    ("OPTIMIZE_WANDB_SWEEP_SECONDS", "0", "OPTIMIZE_WANDB_SWEEP_SECONDS is '0', not a number of seconds above 0"),
    ("OPTIMIZE_PROJECT_QUOTAS", "[1]", "OPTIMIZE_PROJECT_QUOTAS must map project names to quotas"),
])
def test_a_malformed_value_is_refused_naming_the_variable_the_value_and_what_is_allowed(name, text, message):
    with pytest.raises(MalformedSetting) as refused:
        setting(name, {name: text})
    assert refused.value.message == message
    allowed = declared(name).kind.allowed()
    assert refused.value.hint.startswith(f"set {name} to {allowed}, or unset it")
    assert "\n" not in refused.value.message + refused.value.hint
    assert isinstance(refused.value, Invalid) and isinstance(refused.value, ValueError)


def test_the_hint_names_the_default_or_what_takes_its_place():
    with pytest.raises(MalformedSetting) as refused:
        setting("OPTIMIZE_USER_CODE_WORKERS", {"OPTIMIZE_USER_CODE_WORKERS": "four"})
    assert refused.value.hint == ("set OPTIMIZE_USER_CODE_WORKERS to a whole number above 0, or unset it for the "
                                  "default (4)")
    with pytest.raises(MalformedSetting) as refused:
        setting("OPTIMIZE_WANDB", {"OPTIMIZE_WANDB": "sometimes"})
    assert refused.value.hint == "set OPTIMIZE_WANDB to one of offline, online, or unset it (none)"


def test_a_form_of_its_own_is_refused_in_its_owners_words():
    with pytest.raises(Invalid, match=r"the blob store 'gs://b' is not an s3://BUCKET\[/PREFIX\] URL"):
        setting("OPTIMIZE_BLOB_STORE", {"OPTIMIZE_BLOB_STORE": "gs://b"})
    assert setting("OPTIMIZE_BLOB_STORE", {"OPTIMIZE_BLOB_STORE": "s3://bucket/p"}) == "s3://bucket/p"


def test_check_all_refuses_the_first_malformed_setting_in_the_tables_order():
    check_all({})
    with pytest.raises(MalformedSetting, match="OPTIMIZE_EXECUTOR"):
        check_all({"OPTIMIZE_MAX_SHARDS": "x", "OPTIMIZE_EXECUTOR": "k8s"})


# --- secrets -----------------------------------------------------------------------------------------------------

def test_secrets_are_masked_in_the_listing_and_in_refusals():
    env = {"OPTIMIZE_TOKEN": "tok-123", "OPTIMIZE_DATABASE_URL": "postgresql://u:pw@h/db", "OPTIMIZE_MAX_SHARDS": "9"}
    rows = {row["name"]: row for row in listing(env)}
    assert len(rows) == len(SETTINGS)
    for name in ("OPTIMIZE_TOKEN", "OPTIMIZE_DATABASE_URL"):
        assert rows[name]["set"] and rows[name]["secret"]
        assert rows[name]["value"] == MASK and rows[name]["shown"] == MASK
    assert "tok-123" not in repr(rows) and "pw" not in repr(rows)
    assert rows["OPTIMIZE_LEASE_TOKEN"]["value"] is None and not rows["OPTIMIZE_LEASE_TOKEN"]["set"]
    assert rows["OPTIMIZE_MAX_SHARDS"]["value"] == 9 and rows["OPTIMIZE_MAX_SHARDS"]["set"]
    hidden = Setting("OPTIMIZE_HIDDEN_COUNT", Whole(), "3", "A secret count.", secret=True)
    with pytest.raises(MalformedSetting) as refused:
        hidden.read({"OPTIMIZE_HIDDEN_COUNT": "s3cr3t"})
    assert "s3cr3t" not in refused.value.message + refused.value.hint and MASK in refused.value.message


def test_the_listing_carries_a_malformed_settings_refusal_and_no_value():
    rows = {row["name"]: row for row in listing({"OPTIMIZE_GC_SECONDS": "hourly"})}
    row = rows["OPTIMIZE_GC_SECONDS"]
    assert row["value"] is None and row["shown"] == "hourly" and row["set"]
    assert row["problem"].startswith("OPTIMIZE_GC_SECONDS='hourly' is not a number of seconds of at least 0 (set ")
    assert all(other["problem"] is None for name, other in rows.items() if name != "OPTIMIZE_GC_SECONDS")


# --- the settings page -------------------------------------------------------------------------------------------

def test_the_settings_page_is_what_the_table_generates():
    page = (ROOT / "docs" / "settings.md").read_text()
    assert page == render(), "docs/settings.md is stale: python -m optimize.core.settings_page > docs/settings.md"
    assert all(f"| `{name}` |" in page for name in NAMES)
    assert page.count("| `OPTIMIZE_") == len(SETTINGS)  # each once


# --- sweeps of src/ ----------------------------------------------------------------------------------------------

ENV_READERS = {"get", "getenv", "pop", "setdefault", "__getitem__", "__contains__"}
# Written into a child's environment only, never read: the warm worker's padding for the environment it is given.
WRITTEN_ONLY = {"OPTIMIZE_WARM_RESERVE"}


def _sources() -> list[tuple[Path, ast.Module, str]]:
    return [(path, ast.parse(text := path.read_text()), text) for path in sorted(SRC.rglob("*.py"))]


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level `NAME = "OPTIMIZE_..."` assignments (a variable's name kept in a constant)."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.value
    return found


def _named(node: ast.AST | None, constants: dict[str, str]) -> str | None:
    """The OPTIMIZE_ name an argument spells: a literal, a constant holding one, or an f-string beginning with one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    elif isinstance(node, ast.Name):
        text = constants.get(node.id, "")
    elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        text = str(node.values[0].value)
    else:
        return None
    return text if text.startswith("OPTIMIZE_") else None


def _is_environ(node: ast.AST) -> bool:
    """`os.environ`, `environ` or `os` itself (for os.getenv)."""
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or \
        (isinstance(node, ast.Name) and node.id in {"environ", "os"})


def _direct_reads(tree: ast.Module) -> list[tuple[int, str]]:
    constants = _constants(tree)
    reads = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ENV_READERS \
                and _is_environ(node.func.value) and node.args and (name := _named(node.args[0], constants)):
            reads.append((node.lineno, name))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_environ(node.value) \
                and (name := _named(node.slice, constants)):
            reads.append((node.lineno, name))
        elif isinstance(node, ast.Compare) and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops) \
                and any(_is_environ(right) for right in node.comparators) and (name := _named(node.left, constants)):
            reads.append((node.lineno, name))
    return reads


def test_no_optimize_variable_is_read_around_the_table():
    around = [f"{path.relative_to(ROOT)}:{line}: {name}" for path, tree, _ in _sources()
              for line, name in _direct_reads(tree) if path.name != "environment.py"]
    assert around == [], "read these through optimize.core.environment.setting():\n" + "\n".join(around)


def test_the_sweep_finds_a_direct_read_in_each_of_its_forms():
    tree = ast.parse('import os\nfrom os import environ\nNAME = "OPTIMIZE_B"\n'
                     'os.environ.get("OPTIMIZE_A")\nos.getenv(NAME)\nenviron[f"OPTIMIZE_C_{x}"]\n'
                     '"OPTIMIZE_D" in os.environ\nos.environ["OPTIMIZE_E"] = "1"\n')
    assert sorted(name for _, name in _direct_reads(tree)) == ["OPTIMIZE_A", "OPTIMIZE_B", "OPTIMIZE_C_",
                                                                 "OPTIMIZE_D"]  # the write is no read


def test_every_name_read_through_the_table_or_as_a_cli_option_is_declared():
    undeclared = []
    for path, tree, _ in _sources():
        constants = _constants(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            spelled = [node.args[0]] if called in {"setting", "is_set", "declared"} and node.args else []
            spelled += [keyword.value for keyword in node.keywords if keyword.arg == "envvar"]  # Click reads these
            for argument in spelled:
                name = _named(argument, constants)
                if name and not isinstance(argument, ast.JoinedStr) and name not in NAMES:
                    undeclared.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    assert undeclared == [], "declare these in optimize/core/environment.py:\n" + "\n".join(undeclared)


def test_every_optimize_name_the_code_mentions_is_declared():
    """Hints and docstrings name variables to set: each must be one the server reads."""
    mentioned = {}
    for path, _, text in _sources():
        for match in re.finditer(r"OPTIMIZE_[A-Z0-9_]*[A-Z0-9]", text):
            mentioned.setdefault(match.group(), f"{path.relative_to(ROOT)}")
    prefixes = {name for name in mentioned if any(other.startswith(name + "_") for other in NAMES)}
    unknown = {name: where for name, where in mentioned.items() if name not in NAMES | WRITTEN_ONLY | prefixes}
    assert unknown == {}, f"named but not declared: {unknown}"

