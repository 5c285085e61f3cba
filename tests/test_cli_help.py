"""The command line as HPC users read it: ``--help`` on a login node.

Every verb has a description and a worked example; every option has help and
shows its default; an unknown flag prints the verb's own usage and exits 2;
``--json`` is one flag meaning machine-readable output on stdout.  The parser
checked is the real one (:func:`torchmpi.cli.build_parser`), and the help
text is the one argparse prints.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from torchmpi import cli
from torchmpi.cli import main

#: The verbs this checkout's help layout is enforced for.  doctor and
#: allreduce get the same parser class (unknown flags, defaults shown), and
#: their descriptions/examples/--json are checked with their own tests.
HELP_VERBS = ("sites", "render", "concretize", "detect")
JSON_VERBS = ("sites", "render", "concretize", "detect")


def _verb_parsers() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _help(verb: str, capsys) -> str:
    with pytest.raises(SystemExit) as info:
        main([verb, "--help"])
    assert info.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("verb", HELP_VERBS)
def test_help_has_description_and_example(verb: str, capsys) -> None:
    parser = _verb_parsers()[verb]
    text = _help(verb, capsys)
    assert parser.description and parser.description.split("\n")[0] in text
    assert "example" in text and f"$ torchmpi {verb}" in text
    # The example keeps its layout (RawDescriptionHelpFormatter): one command per line.
    example = text[text.index("example"):]
    assert all(line.startswith(("example", "  ")) for line in example.splitlines() if line)


@pytest.mark.parametrize("verb", HELP_VERBS)
def test_every_option_has_help_and_shows_its_default(verb: str, capsys) -> None:
    parser = _verb_parsers()[verb]
    text = " ".join(_help(verb, capsys).split())  # argparse wraps lines
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help, f"{verb} {action.option_strings or action.dest}: no help"
        if action.option_strings and action.nargs != 0:  # takes a value: its default is shown
            rendered = parser.formatter_class(verb)._get_help_string(action)
            assert "default" in rendered, f"{verb} {action.option_strings}: default not shown"
            assert " ".join(rendered.split("%(")[0].split()) in text


@pytest.mark.parametrize("verb", cli.VERBS)
def test_unknown_flag_prints_the_verbs_usage(verb: str, capsys) -> None:
    positional = [a for a in _verb_parsers()[verb]._actions if not a.option_strings]
    with pytest.raises(SystemExit) as info:
        main([verb, *(["derecho"] if positional else []), "--no-such-flag"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: torchmpi {verb} "), err
    assert f"torchmpi {verb}: error: unrecognized arguments: --no-such-flag" in err


@pytest.mark.parametrize("verb", JSON_VERBS)
def test_json_is_one_flag_with_one_meaning(verb: str) -> None:
    actions = [a for a in _verb_parsers()[verb]._actions if "--json" in a.option_strings]
    assert len(actions) == 1
    action = actions[0]
    assert action.option_strings == ["--json"] and action.nargs == 0
    assert action.help.startswith("machine-readable output on stdout")


def test_sites_json(capsys) -> None:
    assert main(["sites", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    derecho = next(e for e in entries if e["name"] == "derecho")
    assert derecho["valid"] and derecho["target"] == "zen3" and derecho["cuda_arch"] == "80"
    assert derecho["mpi"] == "cray-mpich" and derecho["mpi_version"] == "8.1.27"


def test_detect_json(capsys) -> None:
    assert main(["detect", "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert {"target", "gpus", "cuda_arch", "mpi", "gcc"} <= set(facts)


def test_render_json_and_check_json(tmp_path: Path, capsys) -> None:
    out = tmp_path / "env"
    assert main(["render", "derecho", "-o", str(out), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["status"] == "written" and record["site"] == "derecho"
    assert sorted(record["written"]) == sorted(p.name for p in out.iterdir())
    assert main(["render", "--check", "derecho", "-o", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "up-to-date"
    (out / "runtime.sh").write_text("# changed\n")
    assert main(["render", "--check", "derecho", "-o", str(out), "--json"]) == 1
    record = json.loads(capsys.readouterr().out)
    assert record["status"] == "differs" and "runtime.sh" in record["diff"]


def test_render_check_on_a_site_never_rendered_says_so(tmp_path: Path, capsys) -> None:
    out = tmp_path / "never"
    assert main(["render", "--check", "derecho", "-o", str(out)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""  # no diff of four whole files against nothing
    assert f"derecho was never rendered into {out}" in captured.err
    assert "run `torchmpi render derecho`" in captured.err
    assert not out.exists()
    assert main(["render", "--check", "derecho", "-o", str(out), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["status"] == "never-rendered"


def test_no_verb_prints_the_help_on_stderr_and_exits_2(capsys) -> None:
    assert main([]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "usage: torchmpi" in captured.err


def test_no_flag_of_any_verb_says_default_false() -> None:
    """A flag (``render --json``, ``--check``: no value, no word on its default) is off
    unless given: the help adds no ``(default: False)`` to it."""
    parser = cli.build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for verb, sub in action.choices.items():
        text = " ".join(sub.format_help().split())
        assert "(default: False)" not in text, verb
    assert "--check" in action.choices["render"].format_help()


def test_a_verb_missing_a_module_names_the_distribution_to_install() -> None:
    """``ruamel.yaml`` missing: ``pip install ruamel`` (the top-level name)."""
    from torchmpi.errors import UserError

    parser = argparse.ArgumentParser()
    cli._register_unavailable(parser.add_subparsers(dest="verb"), "render", "ruamel.yaml")
    args = parser.parse_args(["render", "x"])
    with pytest.raises(UserError, match=r"'ruamel\.yaml', which is not installed here "
                                        r"\(pip install ruamel\)"):
        args.func(args)


def test_a_torchmpi_bug_exits_with_sysexits_software_error(tmp_path: Path, monkeypatch,
                                                            capsys) -> None:
    """An InternalError (here: a producer whose YAML does not load back, as
    tests/test_render.py plants it) exits 70, sysexits.h's EX_SOFTWARE, not 2."""
    from torchmpi import spackenv

    def broken(site, outdir):
        return ["spack:\n  specs: [\n"], {"spack": {}}

    monkeypatch.setattr(spackenv, "spack_yaml", broken)
    assert main(["render", "derecho", "-o", str(tmp_path / "env")]) == 70
    assert "internal error (a torchmpi bug" in capsys.readouterr().err
