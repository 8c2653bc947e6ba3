"""One description per verb (report/options.py; issue 19 item 1, issue 18 item 6): the command line's flags
and the web page's parameters and form fields are made from it, so each web parameter is a flag of the verb
of the same name, read by the same parser and refused in the same words; and every one is on the form."""

from __future__ import annotations

import argparse
import contextlib
import io
from collections.abc import Callable

import pytest

from gpuplan.cli._workload import workload_from_args
from gpuplan.cli.main import build_parser
from gpuplan.errors import GpuplanError
from gpuplan.models.catalog import catalog_names
from gpuplan.report.options import ALL_WORKLOAD_OPTIONS, Option
from gpuplan.report.verb_options import LOCAL_GROUP, TAKES_WORKLOAD, VERBS, verb_options
from gpuplan.ui.page import FIELDS, field_label, render_form
from gpuplan.ui.query import VERB_OPTIONS, WORKLOAD_OPTIONS, parse_query

CATALOG = tuple(catalog_names())

# The least each verb needs on either front end, so that the one parameter under test is what fails.
NEEDS: dict[str, dict[str, str]] = {
    "estimate": {}, "fit": {"gpu": "H100-SXM"}, "recommend": {}, "plan": {"gpu": "H100-SXM", "gpus": "8"},
    "serve": {"gpu": "H100-SXM"},
    "rl": {"gpu": "H100-SXM", "gpus": "2", "prompts_per_step": "4", "prompt_len": "32", "response_len": "32"},
}
BAD = {"int": ("two", "2.5", "1e400"), "float": ("nan", "x"), "names": ("a,,b",), "choice": ("banana",)}


def _cli_argv(verb: str, option: Option, text: str) -> list[str]:
    base = [f"--{k.replace('_', '-')}={v}" for k, v in NEEDS[verb].items() if k != option.name]
    return [verb, "gpt2", *base, f"{option.cli_flags[-1]}={text}"]


def _cli_error(verb: str, option: Option, text: str) -> str:
    """The command line's one line for ``--flag=text``: argparse's (after 'argument --flag: ') or the
    library's check of the workload (workload_from_args: what the verb runs first)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = build_parser(verb).parse_args(_cli_argv(verb, option, text))
    except SystemExit:
        line = err.getvalue().strip().splitlines()[-1]
        return line.split(": ", 3)[-1]
    if verb not in TAKES_WORKLOAD:
        from gpuplan.cli.rl import settings_from_args

        with pytest.raises(GpuplanError) as info:
            settings_from_args(args)
        return str(info.value)
    with pytest.raises(GpuplanError) as info:
        workload_from_args(args)
    return str(info.value)


def _web_error(verb: str, option: Option, text: str) -> str:
    with pytest.raises(GpuplanError) as info:
        query = parse_query({"model": "gpt2", "verb": verb, **NEEDS[verb], option.param: text}, CATALOG)
        if verb == "rl" and query is not None:  # rl's settings are checked when they are made (as the CLI's)
            from gpuplan.report.verb_options import rl_settings_fields
            from gpuplan.rl.settings import RLSettings

            RLSettings(**rl_settings_fields(query.model, query.values()))
    return str(info.value).removeprefix(f"{option.param}: ")


CASES = [(verb, option, text)
         for verb in VERBS
         for option in (*(ALL_WORKLOAD_OPTIONS if verb in TAKES_WORKLOAD else ()), *verb_options(verb))
         if option.cli and option.web and option.kind in BAD and not option.required and not option.spellings
         for text in BAD[option.kind][:1 if option.kind == "int" and verb != "estimate" else None]]


@pytest.mark.parametrize(("verb", "option", "text"), CASES,
                         ids=[f"{v}-{o.name}-{t}" for v, o, t in CASES])
def test_a_bad_value_is_refused_in_the_same_words_on_both_front_ends(verb: str, option: Option, text: str) -> None:
    """``peft=banana`` answered a full fine-tune on the web page (issue 18 item 6); now every parameter is the
    flag's own parser and check."""
    cli, web = _cli_error(verb, option, text), _web_error(verb, option, text)
    assert "\n" not in web and text[:10] in web
    if option.name == "mode" and verb == "recommend":  # the command line's recommend adds --mode serve
        cli = cli.replace(", 'serve'", "")
    assert cli == web


def test_every_web_parameter_is_a_flag_of_its_verb_with_the_same_default() -> None:
    for verb in VERBS:
        parser = build_parser(verb)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[verb]
        dests: dict[str, argparse.Action] = {}
        for action in sub._actions:  # the first of a dest sets its default (--load-in-4bit | --load-in-8bit)
            dests.setdefault(action.dest, action)
        web = {**(WORKLOAD_OPTIONS if verb in TAKES_WORKLOAD else {}), **VERB_OPTIONS[verb]}
        for option in web.values():
            if not option.cli:  # the form's own spellings of a flag (a checkbox for --tiled-mlp [TILES], a width)
                assert option.name in ("tiled_mlp", "mlp_tiles", "image_width", "component_quant"), option
                continue
            assert option.name in dests, (verb, option.name)
            if verb != "plan" or option.name != "checkpointing":  # plan leaves it open (searched)
                default = dests[option.name].default
                assert default == option.default or (option.name == "mode" and default == "train"), (verb, option)


def test_every_web_parameter_is_on_the_form_with_a_label() -> None:
    form = render_form({}, CATALOG[:3], ("H100-SXM",))
    for param in FIELDS:
        assert f'name="{param}"' in form, param
        assert any(o.label for o in FIELDS[param]), f"{param}: no described label ({field_label(param)!r})"
    assert form.count('name="offload"') == 1  # one field per name, even where verbs share it


def test_the_form_keeps_what_the_user_typed() -> None:
    form = render_form({"peft": "qlora", "lora_rank": "16", "no_ref": "on", "algorithm": "dpo"}, (), ())
    assert '<option value="qlora" selected>' in form and 'value="16"' in form
    assert 'id="f-no_ref" name="no_ref" type="checkbox" checked' in form
    assert '<option value="dpo" selected>' in form


def test_rl_parameters_reach_its_settings_and_the_cli_reads_the_same() -> None:
    from gpuplan.cli.rl import settings_from_args
    from gpuplan.report.verb_options import rl_settings_fields
    from gpuplan.rl.settings import RLSettings

    params = {"model": "gpt2", "verb": "rl", **NEEDS["rl"], "algorithm": "ppo", "peft": "lora", "lora_rank": "16",
              "no_ref": "on", "offload": "params,optimizer", "placement": "split", "rollout_gpus": "1"}
    query = parse_query(params, CATALOG)
    assert query is not None
    web = RLSettings(**rl_settings_fields(query.model, query.values()))
    argv = ["rl", "gpt2", "--gpu=H100-SXM", "--gpus=2", "--prompts-per-step=4", "--prompt-len=32",
            "--response-len=32", "--algorithm=ppo", "--peft=lora", "--lora-rank=16", "--no-ref",
            "--offload=params,optimizer", "--placement=split", "--rollout-gpus=1"]
    assert web == settings_from_args(build_parser("rl").parse_args(argv))
    assert web.ref is False and web.offload == frozenset({"params", "optimizer"}) and web.lora_rank == 16
    for bad, words in (({"lora_rank": "8"}, "lora_rank configures PEFT adapters"),
                       ({"critic": "../x"}, "critic: unknown model"), ({"gpus": "two"}, "gpus: expected a whole")):
        with pytest.raises(GpuplanError, match=words):
            parse_query({**{k: v for k, v in params.items() if k not in ("peft", "lora_rank")}, **bad}, CATALOG)


def _a_value(option: Option) -> list[str]:
    """The flag given with a valid value other than its default."""
    flag = option.cli_flags[-1]
    if option.kind == "switch":
        return [flag]
    text = {"int": "2", "float": "0.5", "model": "gpt2", "text": "1:1"}.get(option.kind)
    if option.kind == "choice":
        text = next(c for c in option.choices if c != option.default)
    return [f"{flag}={text}"]


SERVE_PAGED = [o for o in verb_options("serve")
               if o.name not in ("gpu", "engine", "context", "concurrency") and o.group != LOCAL_GROUP]


@pytest.mark.parametrize("option", SERVE_PAGED, ids=[o.name for o in SERVE_PAGED])
def test_every_paged_engine_flag_is_refused_by_a_local_engine(option: Option,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """cli/serve.py read lists of flag names beside the flags (``--disaggregate`` was missing: silently dropped
    with --engine llama.cpp); now the description is the list."""
    from gpuplan.cli.main import main

    assert main(["serve", "gpt2", "--gpu", "L4", "--engine", "llama.cpp", *_a_value(option)]) == 2
    err = capsys.readouterr().err
    assert f"--{option.name.replace('_', '-')}" in err and "flags of the paged engines" in err


def test_every_web_option_is_a_parameter_of_the_library_call_the_page_makes() -> None:
    """ui/jobs.py passes ``Query.values()`` to the CLI's library call by the options' names: a name the call
    does not take would be an internal error (500) instead of an answer."""
    import dataclasses
    import inspect

    from gpuplan.advise.fit import fit
    from gpuplan.advise.recommend import recommend
    from gpuplan.estimate import estimate
    from gpuplan.parallel.plan import plan
    from gpuplan.rl.settings import RLSettings
    from gpuplan.serve import serve

    calls: dict[str, Callable[..., object]] = {
        "estimate": estimate, "fit": fit, "recommend": recommend, "plan": plan, "serve": serve}
    for verb, call in calls.items():
        taken = set(inspect.signature(call).parameters)
        assert {o.name for o in VERB_OPTIONS[verb].values()} <= taken | {"gpu", "axis"}, verb  # axis: which call
    assert {o.name for o in VERB_OPTIONS["rl"].values()} <= {f.name for f in dataclasses.fields(RLSettings)}


def test_a_field_the_mode_never_reads_is_left_out_with_the_clis_note() -> None:
    """As `gpuplan estimate gpt2 --mode infer --optimizer sgd` (cli/_workload.ignored_flag_notes): the answer
    stands, the workload echoed is the one modelled, and the share link leaves the field out."""
    q = parse_query({"model": "gpt2", "mode": "infer", "optimizer": "sgd", "batch_size": "2"}, CATALOG)
    assert q is not None and q.mode_ignored == ("optimizer",) and q.ignored == ()
    assert q.workload.optimizer == "adamw" and "optimizer" not in q.params()
    args = build_parser("estimate").parse_args(["estimate", "gpt2", "--mode", "infer", "--optimizer", "sgd",
                                                "--batch-size", "2"])
    args.notes = []
    assert workload_from_args(args) == q.workload


def test_fits_axis_rule_is_the_same_on_both_front_ends() -> None:
    """fit --axis on the web page: report/verb_options.check_fit_axis, the command line's rule, each in its
    own spelling of the option names."""
    from gpuplan.cli.main import main

    cases = (({"axis": "seq-len", "seq_len": "64"}, "axis seq-len searches the sequence length: drop seq_len (the "
              "batch is batch_size)", "--axis seq-len searches the sequence length: drop --seq-len (the batch is "
              "--batch-size)"),
             ({"axis": "resolution", "target_batch_size": "8"}, "target_batch_size applies to axis batch; axis "
              "resolution answers the largest image size only", "--target-batch-size applies to --axis batch; "
              "--axis resolution answers the largest image size only"))
    for extra, web, cli in cases:
        with pytest.raises(GpuplanError) as info:
            parse_query({"model": "gpt2", "verb": "fit", "gpu": "H100-SXM", **extra}, CATALOG)
        assert str(info.value) == web
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            assert main(["fit", "gpt2", "--gpu", "H100-SXM", *(f"--{k.replace('_', '-')}={v}"
                                                               for k, v in extra.items())]) == 2
        assert err.getvalue().strip() == f"gpuplan fit: error: {cli}"


# --- every flag of the verbs that take options is described (issue 19 item 1: measure, sweep, --emit) ----------

DESCRIBED_VERBS = ("estimate", "fit", "recommend", "plan", "serve", "rl", "measure", "sweep")


def _described(verb: str) -> tuple[Option, ...]:
    """Every option the description gives ``verb``: the workload's where it takes one, its own, the ones it
    shares (sweep: plan's; recommend --mode serve: serve's), --emit, and how the answer is given."""
    from gpuplan.report.options import JSON_OUTPUT, NO_CACHE, PICTURE_OPTIONS
    from gpuplan.report.verb_options import emit_options

    shared = {"sweep": verb_options("plan"), "recommend": verb_options("serve")}.get(verb, ())
    emit = emit_options(verb) if verb in ("plan", "rl") else ()
    pictures = PICTURE_OPTIONS if verb in ("estimate", "fit", "recommend", "plan", "serve") else ()
    workload = ALL_WORKLOAD_OPTIONS if verb in (*TAKES_WORKLOAD, "measure", "sweep", "serve") else ()
    return (*workload, *verb_options(verb), *shared, *emit, *pictures, JSON_OUTPUT, NO_CACHE)


def _sub(verb: str) -> argparse.ArgumentParser:
    parser = build_parser(verb)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[verb]
    assert isinstance(sub, argparse.ArgumentParser)
    return sub


@pytest.mark.parametrize("verb", DESCRIBED_VERBS)
def test_every_flag_of_the_verb_is_described_once(verb: str) -> None:
    """measure's flags, sweep's, the launcher's, plan's and rl's --emit and --plot/--html/--json/--no-cache were
    argparse calls beside the description; now each flag comes from an Option, with its default and help."""
    described = _described(verb)
    spellings = {s for o in described for s in (*o.cli_flags, *(f for f, _, _ in o.spellings))}
    for action in _sub(verb)._actions:
        if not action.option_strings or action.dest == "help":
            continue
        assert set(action.option_strings) <= spellings, (verb, action.option_strings)
    from gpuplan.report.options import JSON_OUTPUT, NO_CACHE, PICTURE_OPTIONS
    from gpuplan.report.verb_options import emit_options

    # the verb's own options: argparse's default and help are the description's (shared ones: the tests above)
    own = (*verb_options(verb), *(emit_options(verb) if verb in ("plan", "rl") else ()), *PICTURE_OPTIONS,
           JSON_OUTPUT, NO_CACHE)
    by_name = {o.name: o for o in own if o.cli and not o.spellings}
    checked = 0
    for action in _sub(verb)._actions:
        option = by_name.get(action.dest)
        if option is None or (action.help is None and not option.help):
            continue
        assert action.default == option.default, (verb, option.name, action.default, option.default)
        assert action.help == option.help, (verb, option.name)
        checked += 1
    assert checked >= 3, verb


def test_measure_and_rl_choices_are_the_librarys() -> None:
    """The described --layout and rl --emit values are the library's lists (which import torch / rl)."""
    from gpuplan.measure.layouts import LAYOUTS
    from gpuplan.report.verb_options import MEASURE_LAYOUTS, RL_EMIT_FRAMEWORKS
    from gpuplan.rl.settings import FRAMEWORKS

    assert MEASURE_LAYOUTS == LAYOUTS
    assert sorted(RL_EMIT_FRAMEWORKS) == sorted(FRAMEWORKS)


def test_measure_and_sweep_flags_reach_their_runs() -> None:
    """The described flags parse to the values measure / sweep / plan --emit read (dests and defaults)."""
    args = build_parser("measure").parse_args(["measure", "gpt2", "--steps", "3", "--no-record", "--layout", "fsdp",
                                               "--launcher", "slurm", "--partition", "p", "--gpus-per-node", "4"])
    assert (args.steps, args.warmup, args.no_record, args.force, args.layout) == (3, 2, True, False, "fsdp")
    assert (args.launcher, args.partition, args.gpus_per_node, args.nodes, args.no_store) == ("slurm", "p", 4, None,
                                                                                               False)
    args = build_parser("sweep").parse_args(["sweep", "gpt2", "--gpus", "2", "--gpu", "H100-SXM", "--no-store"])
    assert (args.top, args.steps, args.no_store, args.store, args.launcher) == (3, 3, True, None, "local")
    args = build_parser("plan").parse_args(["plan", "gpt2", "--gpus", "2", "--gpu", "H100-SXM", "--emit", "jobset",
                                            "--queue", "q", "--json"])
    assert (args.emit, args.queue, args.json, args.no_cache, args.plot) == ("jobset", "q", True, False, None)
