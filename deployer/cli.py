"""The ``deploy`` command.

    deploy MODEL --l1 64K --sram 256K --flash 1M --target host -o out/
    deploy verify MODEL [same options] [--input x.npy] [--seeds N] [--json] [--per-layer] [--qemu]
    deploy targets [--json]
"""
from __future__ import annotations

import os
import signal
import sys


def interrupted(error: BaseException) -> bool:
    """Ctrl-C, or an error it caused: an extension module interrupted while it initialises raises
    ImportError from the KeyboardInterrupt (pybind11's "initialization failed")."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, KeyboardInterrupt):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def _interrupted_at_start() -> None:
    """Ctrl-C while this module imports (numpy, OR-Tools, the readers: a second or so, before
    any command runs): the one line and status 130 of any interrupt, and with --json its error
    object, rather than a traceback from inside an import. Nothing has been written yet, so the
    process ends at once: an interrupt seen inside an extension's initialisation can leave
    CPython set to end the process by SIGINT, whatever status it is given."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C while this is written
    if "--json" in sys.argv[1:]:
        sys.stdout.write('{\n  "error": {\n    "type": "Interrupted",\n    "message": "interrupted",\n'
                         '    "exit_status": 130\n  }\n}\n')
    sys.stderr.write("error: interrupted\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130)


try:  # the console script and python -m both import this module before main() can catch anything
    import json
    import math
    import time
    import traceback
    import warnings
    from dataclasses import replace
    from pathlib import Path

    import click
    import numpy as np

    from network_parser.cut import CutSpec
    from network_parser.errors import DeployError, UsageError
    from network_parser.side_files import load_npy

    from .flag_values import ADDRESS_SPACE_BYTES, FAMILIES, KERNELS, PLANNERS, parse_share, parse_size  # noqa: F401
    from .frontends import frontend_for
    from .llm_passes import KV_FORMATS, ROPE_MODES, WEIGHT_FORMATS, LanguageFlags, logits_k
    from .output import check_report, write_output, write_report
    from .render import ERROR_CHARS, display, terminal_text
    from backends import BACKENDS

    from .pipeline import Options, deploy, finish
    from .report import build_summary, dump_arena_plan, dump_graph, summary_table, target_info, targets_table
except BaseException as e:
    if interrupted(e):
        _interrupted_at_start()
    raise

REPORT_RULE = ("It is written whole (a temporary file renamed into place); an existing file is replaced only when "
               "it is a report deploy wrote, never through a symbolic link, never the model or an input")

def _options(target, l1, sram, flash, planner="cpsat", time_limit=5.0, no_in_place=False, tiler="cpsat",
             tile_objective="auto", l3=None, patch="auto", max_overhead=None, kernels="auto",
             input_layout="nchw", output_layout="nchw", input_type=None, inputs=None, outputs=None,
             io=None, overlap="on", input_memory="arena", order="auto", memory_map=None,
             banks_for=(None, None)) -> Options:
    check_time_limit(time_limit)
    if memory_map is not None:
        given = [flag for flag, value in (("--sram", sram), ("--l1", l1), ("--l3", l3)) if value is not None]
        if given:
            raise UsageError(f"--memory-map describes the part's memories: give it or {', '.join(given)}, not both")
    options = Options(target=target, l1=parse_size(l1, "--l1"), sram=parse_size(sram, "--sram"),
                   flash=parse_size(flash, "--flash"),
                   planner=planner, time_limit_s=time_limit, in_place=not no_in_place, tiler=tiler,
                   overlap=overlap == "on" and not no_in_place, input_memory=input_memory, order=order,
                   tile_objective=tile_objective, l3=parse_size(l3, "--l3"), patch=patch,
                   max_overhead=None if max_overhead is None else parse_share(max_overhead), kernels=kernels,
                   input_layout=input_layout,
                   output_layout=output_layout, input_type=input_type, cut=_cut(inputs, outputs, io),
                   input_bank=banks_for[0], output_bank=banks_for[1])
    if memory_map is None:
        return options
    from .memory_map import read_memory_map, with_memory_map
    return with_memory_map(options, read_memory_map(memory_map))


def _cut(inputs: str | None, outputs: str | None, io: str | None) -> CutSpec:
    """--inputs / --outputs: comma-separated tensor names (a name holding a comma cannot be cut at)."""
    def names(flag, text):
        if text is None:
            return ()
        items = tuple(n.strip() for n in text.split(","))
        if not all(items):
            raise UsageError(f"{flag} takes tensor names separated by commas, got {text!r}")
        return items
    return CutSpec(names("--inputs", inputs), names("--outputs", outputs), io)


TIME_LIMIT_MAX_S = 1e6  # about 11 days: beyond it a limit is no limit (and timers overflow)


def check_time_limit(seconds: float) -> float:
    if not math.isfinite(seconds) or not 0 < seconds <= TIME_LIMIT_MAX_S:
        raise UsageError(f"--time-limit must be a number of seconds above 0 and at most {TIME_LIMIT_MAX_S:g}, "
                         f"got {seconds}")
    return seconds


def language_options(f):
    """The flags only language models (.safetensors) take, on every command that takes them."""
    for opt in reversed((
        click.option("--weights", "llm_weights", type=click.Choice(WEIGHT_FORMATS), default="q4_0", show_default=True,
                     help=".safetensors language models: the matrices' format (Q4_0: blocks of 32 with a bfloat16 scale)"),
        click.option("--kv-cache", "llm_kv", type=click.Choice(KV_FORMATS), default="int8", show_default=True,
                     help=".safetensors language models: the KV cache's format"),
        click.option("--context", "llm_context", type=int, default=None,
                     help=".safetensors language models: KV cache positions (default: all the model's)"),
        click.option("--tokenizer", "llm_tokenizer", type=click.Path(path_type=Path), default=None,
                     help=".safetensors language models: the folder of the GPT-2 vocab.json and merges.txt copied into the "
                     "output for deploy generate (default: the model's folder)"),
        click.option("--prune-vocab", "llm_prune", type=click.Path(path_type=Path), default=None,
                     help=".safetensors language models: a JSON list of the token ids to keep (embedding and head rows); "
                     "out/token_ids.json maps the engine's ids back"),
        click.option("--logits", "llm_logits", default="full", show_default=True, metavar="full|argmax|topk:K",
                     help=".safetensors language models: output 0 is the float logits (full), the most likely token id "
                     "(argmax), or the K most likely ids with their logits as output 1 (topk:K): the head streams its rows, "
                     "so SRAM no longer holds a float per token of the vocabulary"),
        click.option("--rope", "llm_rope", type=click.Choice(ROPE_MODES), default="auto", show_default=True,
                     help=".safetensors language models with rotary embeddings: their cosines and sines as tables in flash, "
                     "or computed each token (a sine and cosine per frequency); auto: the tables unless --flash cannot hold "
                     "them"),
    )):
        f = opt(f)
    return f


def budget_options(f):
    for opt in reversed((
        click.option("--target", type=click.Choice(sorted(BACKENDS)), default="host", show_default=True,
                     help="target (deploy targets lists them)"),
        click.option("--l1", default=None, help="L1 scratchpad budget, e.g. 64K"),
        click.option("--sram", default=None, help="SRAM budget for the arena, e.g. 256K"),
        click.option("--flash", default=None, help="flash budget for weights and code, e.g. 1M"),
        click.option("--l3", default=None, help="external memory reached by DMA only (e.g. 8M): weights and "
                     "activations that do not fit flash or SRAM stream from there"),
        click.option("--memory-map", "memory_map", type=click.Path(path_type=Path), default=None,
                     help="a JSON file of the part's RAM banks (deployer/memory_map.schema.json): the activations "
                     "are placed across them; replaces --sram, --l1 and --l3"),
        click.option("--input-bank", default=None, help="with --memory-map: the bank the network's inputs lie in "
                     "(a camera's frame buffer in its own RAM)"),
        click.option("--output-bank", default=None, help="with --memory-map: the bank its outputs lie in"),
        click.option("--patch", default="auto", show_default=True,
                     help="run stages of the network patch by patch: auto (the stages that fit --sram, or the "
                     "part's own SRAM, at the least recomputed MACs; none when it fits whole), off, or RxC@LAYER "
                     "(the first stage, e.g. 4x4@12)"),
        click.option("--max-overhead", default=None,
                     help="MACs the patch stages may recompute, as a share of the network's (default 20%); "
                     "given without --sram: the stages needing the least SRAM within it"),
        click.option("--planner", type=click.Choice(PLANNERS), default="cpsat", show_default=True,
                     help="arena planner"),
        click.option("--time-limit", type=float, default=5.0, show_default=True,
                     help="seconds the CP-SAT planner may search"),
        click.option("--no-in-place", is_flag=True, help="only zero-copy reshapes share bytes (implies --overlap off)"),
        click.option("--overlap", type=click.Choice(("on", "off")), default="on", show_default=True,
                     help="let a layer's output start inside the input it consumes, in an order that reads "
                     "every byte before it is overwritten (no MAC recomputed)"),
        click.option("--input-memory", type=click.Choice(("arena", "external")), default="arena", show_default=True,
                     help="where the network's input lives: in the planned arena, or outside it (the "
                     "application's own buffer, read-only, passed with inference_set_input before each run)"),
        click.option("--order", type=click.Choice(("auto", "file")), default="auto", show_default=True,
                     help="the order the ops run in: auto (on a branched graph, the order with the least peak "
                     "when it plans to less SRAM than the file's) or the model file's"),
        click.option("--tiler", type=click.Choice(("cpsat", "greedy")), default="cpsat", show_default=True,
                     help="how layers are cut into L1 tiles (with --l1)"),
        click.option("--tile-objective", type=click.Choice(("auto", "l1", "cycles")), default="auto", show_default=True,
                     help="tiles that use L1 best, or fewest modeled cycles; auto: the target's (cycles on "
                          "Cortex-M, whose cost model is fitted to counted instructions; l1 elsewhere)"),
        click.option("--kernels", type=click.Choice(KERNELS), default="auto", show_default=True,
                     help="kernels: auto (the target's kernel families, in order), plain (portable C), or one "
                          "family: " + "; ".join(f"{f.name} ({f.description})" for f in FAMILIES.values())),
        click.option("--input-layout", type=click.Choice(("nchw", "nhwc")), default="nchw", show_default=True,
                     help="ONNX models: the layout of the engine's 3-D/4-D inputs (nchw: the model's own)"),
        click.option("--output-layout", type=click.Choice(("nchw", "nhwc")), default="nchw", show_default=True,
                     help="ONNX models: the layout of the engine's 3-D/4-D outputs"),
        click.option("--input-type", type=click.Choice(("int8", "uint8", "int16")), default=None,
                     help="integer ONNX graphs: the range of the input values (default: from the model's test "
                     "vectors, else guessed from the graph)"),
        click.option("--inputs", "cut_inputs", default=None,
                     help=".tflite models: deploy the part of the model from these tensors (names, comma-separated)"),
        click.option("--outputs", "cut_outputs", default=None,
                     help=".tflite models: ... to these tensors (ops past them, e.g. a float post-processing tail, "
                     "are never read)"),
        click.option("--io", type=click.Choice(("int8", "uint8")), default=None,
                     help=".tflite models: take and give int8 (or uint8) where the model quantizes a float input "
                     "or dequantizes to a float output (as a converter's inference_input_type=int8)"),
    )):
        f = opt(f)
    return f


def say(text: str = "", err: bool = False) -> None:
    """One message for people: anything a model contributed to it is shown, never obeyed by
    the terminal."""
    click.echo(terminal_text(text), err=err)


def json_text(value) -> str:
    """``value`` as strict JSON (indented): NaN and the infinities, which JSON has no numbers for
    (json.dumps would write NaN / Infinity, which JSON parsers refuse), become the strings "nan",
    "inf" and "-inf" (float() reads them back)."""
    def finite(v):
        if isinstance(v, float) and not math.isfinite(v):
            return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
        if isinstance(v, dict):
            return {k: finite(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [finite(x) for x in v]
        return v
    return json.dumps(finite(value), indent=2, allow_nan=False)


def exit_status(error: DeployError) -> int:
    return 2 if isinstance(error, UsageError) else 1


def report_error(kind: str | None, message: str, status: int, as_json: bool) -> None:
    """One line on stderr (``error: KIND: message``, cut to a readable length); with --json, the
    same as ``{"error": {...}}`` on stdout too."""
    message = terminal_text(message, ERROR_CHARS).replace("\n", " ")
    if as_json:
        click.echo(json.dumps({"error": {"type": kind or "Interrupted", "message": message, "exit_status": status}},
                              indent=2))
    click.echo(f"error: {kind}: {message}" if kind else f"error: {message}", err=True)


class DefaultGroup(click.Group):
    """`deploy MODEL ...` runs the `build` command; `deploy verify ...` the subcommand."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            args = ["build", *args]
        ctx.meta["json"] = "--json" in args
        try:
            return super().parse_args(ctx, args)
        except KeyboardInterrupt:  # before invoke() (click would say "Aborted!" and exit 1)
            report_error(None, "interrupted", 130, ctx.meta["json"])
            sys.exit(130)

    def invoke(self, ctx):
        """A user's error as one line and status 1 or 2; warnings as one ``warning:`` line each;
        Ctrl-C as one line and status 130 (the output folder is written whole or not at all, so it
        is left as it was); an internal error as one line and status 3, its traceback only with
        DEPLOY_TRACEBACK=1. With --json, every error is also a JSON object on stdout."""
        as_json = ctx.meta.get("json", False)
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            try:
                return super().invoke(ctx)
            except DeployError as e:
                report_error(e.kind, str(e.args[0]) if e.args else "", exit_status(e), as_json)
                sys.exit(exit_status(e))
            except KeyboardInterrupt:
                report_error(None, "interrupted; nothing was written", 130, as_json)
                sys.exit(130)
            except click.exceptions.ClickException as e:  # a flag or argument click refused: one line too
                command = f" {ctx.invoked_subcommand}" if ctx.invoked_subcommand not in (None, "build") else ""
                report_error("UsageError", f"{e.format_message()} (deploy{command} --help lists the options)",
                             e.exit_code, as_json)
                sys.exit(e.exit_code)
            except (click.exceptions.Exit, click.exceptions.Abort, SystemExit):
                raise
            except Exception as e:  # noqa: BLE001 - a bug: say so on one line, keep the traceback on request
                if interrupted(e):  # Ctrl-C while an extension module loaded
                    report_error(None, "interrupted; nothing was written", 130, as_json)
                    sys.exit(130)
                if os.environ.get("DEPLOY_TRACEBACK"):
                    raise
                at = traceback.extract_tb(e.__traceback__)[-1]
                report_error("InternalError", f"{type(e).__name__}: {e} (at {Path(at.filename).name}:{at.lineno}; "
                             f"a bug in the deployer: DEPLOY_TRACEBACK=1 shows the traceback)", 3, as_json)
                sys.exit(3)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    click.echo(f"warning: {terminal_text(message, ERROR_CHARS)}".replace("\n", " "), err=True)


@click.group(cls=DefaultGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mcu-deployer", prog_name="deploy", message="%(prog)s %(version)s")
def main() -> None:
    """Compile an int8 .tflite model into a self-contained C inference engine."""


@main.command("build")
@click.argument("model", type=click.Path(path_type=Path))
@budget_options
@click.option("-o", "--output", "out_dir", type=click.Path(path_type=Path), default=Path("out"),
              show_default=True, help="output folder")
@click.option("--force", is_flag=True, help="replace an existing folder that is not a deploy output")
@click.option("--rtos", type=click.Choice(("baremetal", "freertos")), default="baremetal", show_default=True,
              help="the task glue (inference_task.c/.h): a step function, or a FreeRTOS task woken by notification")
@click.option("--debug-guards", is_flag=True,
              help="a checking build: canaries around every arena buffer, checked after each layer, and bounds checks "
              "on every DMA copy (inference_run() returns INFERENCE_GUARD_FAILED)")
@language_options
@click.option("--dump-ir", is_flag=True, help="print the graph after rewrites, one layer per line")
@click.option("--dump-plan", is_flag=True, help="print the arena plan and the tiling")
@click.option("--auto-optimize", is_flag=True,
              help="when the plan is over a budget, apply deploy suggest's measured recommendations until it fits")
@click.option("--json", "as_json", is_flag=True, help="print a JSON summary (memory, solvers, wall times) instead")
@click.option("-q", "--quiet", is_flag=True, help="print nothing but errors")
def build_cmd(model, target, l1, sram, flash, l3, memory_map, input_bank, output_bank, patch, max_overhead, planner, time_limit, no_in_place, overlap, input_memory, order, tiler, tile_objective,
              kernels, input_layout, output_layout, input_type, cut_inputs, cut_outputs, io, out_dir, force, rtos, debug_guards, llm_weights, llm_kv,
              llm_context, llm_tokenizer, llm_prune, llm_logits, llm_rope, dump_ir, dump_plan, auto_optimize, as_json,
              quiet):
    """Generate the C engine for MODEL into the output folder (with report.html)."""
    from .suggest import auto_optimize as optimize

    language = frontend_for(model, "build").kind == "language_model"
    _refuse_flags_of_the_other_kind(language)
    if language:
        return _build_llm(model, out_dir, force, target, sram, flash, planner, time_limit, kernels, llm_weights, llm_kv,
                          llm_context, llm_tokenizer, llm_prune, rtos, debug_guards, dump_ir, dump_plan, quiet,
                          input_memory, llm_logits, l3, llm_rope, as_json)
    start = time.perf_counter()
    options = _options(target, l1, sram, flash, planner, time_limit, no_in_place, tiler, tile_objective, l3,
                       patch, max_overhead, kernels, input_layout, output_layout, _input_type(model, input_type),
                       cut_inputs, cut_outputs, io, overlap=overlap, input_memory=input_memory, order=order, memory_map=memory_map, banks_for=(input_bank, output_bank))
    options = replace(options, rtos=rtos, debug_guards=debug_guards)
    with _progress(quiet):
        steps = []
        if auto_optimize:  # its last plan is the one to emit
            options, steps, planned = optimize(model, options)
            dep = finish(replace(planned, options=replace(planned.options, link_elf=True)))
        else:
            dep = deploy(model, replace(options, link_elf=True))  # on Cortex-M: the linked image's memory too
    if dump_ir:
        say(dump_graph(dep.graph))
    if dump_plan:
        say(dump_arena_plan(dep))
    write_output(dep.files, out_dir, force=force)
    wall = time.perf_counter() - start
    if as_json:
        click.echo(json_text(build_summary(dep, out_dir, wall, steps)))
    elif not quiet:
        say(summary_table(dep))
        for st in steps:
            say(f"auto-optimize: {' '.join(st.recommendation.flags)} ({st.recommendation.name}): SRAM "
                f"{st.before.sram_bytes:,} -> {st.after.sram_bytes:,} B, flash "
                f"{st.before.flash_bytes:,} -> {st.after.flash_bytes:,} B")
        say(f"wrote {len(dep.files)} files to {out_dir}/ in {wall:.2f} s")


QUANT_SNR_WARN_DB = 15.0  # below this a quantized matrix is worth a look (Q4_0 of Gaussian weights: about 21 dB)


# The build flags a language model takes; every other flag given explicitly is refused by name,
# and these (--weights ... --logits) are refused for a network.
LANGUAGE_MODEL_FLAGS = frozenset({"model", "target", "sram", "flash", "l3", "planner", "time_limit", "out_dir", "force",
                                  "rtos", "debug_guards", "dump_ir", "dump_plan", "quiet", "input_memory", "kernels",
                                  "as_json"})
LANGUAGE_MODEL_ONLY = ("llm_weights", "llm_kv", "llm_context", "llm_tokenizer", "llm_prune", "llm_logits", "llm_rope")


VERIFY_LANGUAGE_FLAGS = frozenset({"seeds", "as_json", "sanitize", "on_qemu", "clock_mhz"})


def _refuse_flags_of_the_other_kind(language: bool, extra: frozenset = frozenset()) -> None:
    """A flag the model's kind does not use is an error naming it, never silently dropped
    (``extra``: the command's own flags a language model takes too)."""
    ctx = click.get_current_context()
    given = [p for p in ctx.command.params
             if ctx.get_parameter_source(p.name) in (click.core.ParameterSource.COMMANDLINE,
                                                     click.core.ParameterSource.ENVIRONMENT)]
    if language:
        wrong = [p for p in given if p.name not in LANGUAGE_MODEL_FLAGS | extra and p.name not in LANGUAGE_MODEL_ONLY]
        if any(p.name == "memory_map" for p in wrong):
            raise UsageError("--memory-map places a network's activations: a language model plans one arena")
        if wrong:
            takes = [p.opts[0] for p in ctx.command.params if isinstance(p, click.Option)
                     and (p.name in LANGUAGE_MODEL_FLAGS | extra or p.name in LANGUAGE_MODEL_ONLY)]
            raise UsageError(f"{', '.join(p.opts[0] for p in wrong)}: not a flag for language models (.safetensors); "
                             f"deploy {ctx.info_name} takes {', '.join(takes)} for them")
    else:
        wrong = [p for p in given if p.name in LANGUAGE_MODEL_ONLY]
        if wrong:
            raise UsageError(f"{', '.join(p.opts[0] for p in wrong)}: only for language models (.safetensors)")


def _language_model_options(target, sram, flash, l3, planner, time_limit, kernels, language, **rest) -> Options:
    """The options of a language model's command: its budgets parsed, its --logits checked before
    anything is read, ``rest`` (rtos, debug_guards, input_memory) as given."""
    logits_k(language.logits)
    return Options(target=target, sram=parse_size(sram, "--sram"), flash=parse_size(flash, "--flash"),
                   l3=parse_size(l3, "--l3"), planner=planner, time_limit_s=check_time_limit(time_limit),
                   kernels=kernels, language=language, **rest)


def _build_llm(model, out_dir, force, target, sram, flash, planner, time_limit, kernels, weights, kv, context, tokenizer,
               prune, rtos, debug_guards, dump_ir, dump_plan, quiet, input_memory="arena", logits="full",
               l3=None, rope="auto", as_json=False) -> None:
    """A .safetensors decoder (GPT-Neo, LLaMA family): its C engine, manifest and tokenizer files."""
    from network_parser.transformer_ir import op_summary

    language = LanguageFlags(weights=weights, kv=kv, context=context, tokenizer=tokenizer, prune_vocab=prune,
                             logits=logits, rope=rope)
    options = _language_model_options(target, sram, flash, l3, planner, time_limit, kernels, language, rtos=rtos,
                                      debug_guards=debug_guards, input_memory=input_memory)
    start = time.perf_counter()
    with _progress(quiet):
        dep = deploy(model, options)
    if dump_ir:
        for k, op in enumerate(dep.graph.ops):
            say(f"{k:4d}  {op_summary(op)}")
    if dump_plan:
        say(dump_arena_plan(dep))
    write_output(dep.files, out_dir, force=force)
    quantization = dep.language.quantization
    for name, rmse, snr in quantization:
        if snr < QUANT_SNR_WARN_DB:
            say(f"warning: {name}: {weights} weights at {snr:.1f} dB SNR (RMSE {rmse:.3g})", err=True)
    if as_json:
        click.echo(json_text(build_summary(dep, out_dir, time.perf_counter() - start)))
        return
    if quiet:
        return
    c, m, kept = dep.graph.config, dep.memory, dep.language.kept
    note = f" (pruned from {dep.language.vocab})" if kept is not None else ""
    say(f"{dep.graph.name}: {c.summary()}{note}; weights {weights}, KV cache {kv} x {dep.graph.kv.context} "
        f"positions")
    if quantization:
        worst = min(quantization, key=lambda r: r[2])
        say(f"quantization: {len(quantization)} matrices, worst SNR {worst[2]:.1f} dB ({worst[0]}, "
            f"RMSE {worst[1]:.3g}); per matrix in manifest.json")
    if dep.graph.l3 is not None:
        from .llm_passes import streamed_bytes_per_token
        say(f"L3 {m.l3_bytes:,} B: {len(dep.graph.l3.matrices)} matrices streamed, "
            f"{streamed_bytes_per_token(dep.graph):,} B read per token ({dep.graph.name}_l3_weights.bin)")
    say(f"flash {m.flash_bytes:,} B (weights {m.weights_bytes:,} + code estimate "
        f"{m.code_bytes_estimate:,}); SRAM {m.sram_bytes:,} B (KV cache {m.state_bytes:,} + "
        f"arena {m.arena_bytes:,}, {dep.arena.method})")
    say(f"wrote {len(dep.files)} files to {out_dir}/")


@main.command("generate")
@click.argument("out_dir", type=click.Path(path_type=Path))
@click.argument("prompt")
@click.option("--max-tokens", default=40, show_default=True, help="the most tokens to generate")
@click.option("--temperature", type=float, default=0.0, show_default=True,
              help="0: greedy, the most likely token each step; above 0: sample from softmax(logits / T), "
                   "reproducibly for a --seed (engines deployed with --logits full or topk:K)")
@click.option("--top-k", "top_k", type=int, default=0, show_default=True,
              help="sample among the K most likely tokens (0: all the engine gives, the vocabulary or the K of "
                   "--logits topk:K)")
@click.option("--seed", type=int, default=0, show_default=True,
              help="the sampler's seed (0 to 2**64-1): the same seed, the same tokens")
@click.option("--stop", "stop", type=int, multiple=True, metavar="ID",
              help="also end at this token id, an id as the JSON's ids give them (repeatable); the model's "
                   "end-of-text id always ends")
@click.option("--tokenizer", type=click.Path(path_type=Path), default=None,
              help="folder of the GPT-2 vocab.json and merges.txt (default: the output folder's copy)")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
def generate_cmd(out_dir, prompt, max_tokens, temperature, top_k, seed, stop, tokenizer, as_json):
    """Build the language-model engine in OUT_DIR for this machine and continue PROMPT, greedily or
    sampled with a seed. The JSON result says why it stopped: eos, stop, max_tokens or positions."""
    from .generate import generate

    result = generate(out_dir, prompt, max_tokens, tokenizer, temperature=temperature, top_k=top_k, seed=seed,
                      stop=stop)
    if as_json:
        click.echo(json_text(result))
        return
    say(prompt + result["text"])
    say(f"{result['tokens']} tokens generated after a {result['prompt_tokens']}-token prompt "
        f"(stopped: {result['stop_reason']}): {result['tokens_per_s']:,.0f} tokens/s on this machine", err=True)


def _progress(quiet: bool):
    """Long steps shown on stderr: a bar on a terminal, plain lines otherwise, nothing when quiet."""
    from solver import progress
    return progress.reporting(progress.Silent() if quiet else progress.for_stream(sys.stderr))


@main.command("suggest")
@click.argument("model", type=click.Path(path_type=Path))
@budget_options
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON")
@click.option("--front", "with_front", is_flag=True,
              help="also the SRAM x MAC-overhead front: the least SRAM within each MAC budget, each point planned")
@click.option("-q", "--quiet", is_flag=True, help="no progress on stderr")
@language_options
def suggest_cmd(model, target, l1, sram, flash, l3, memory_map, input_bank, output_bank, patch, max_overhead, planner, time_limit, no_in_place, overlap, input_memory, order, tiler,
                tile_objective, kernels, input_layout, output_layout, input_type, cut_inputs, cut_outputs, io, as_json,
                with_front, quiet, llm_weights, llm_kv, llm_context, llm_tokenizer, llm_prune, llm_logits, llm_rope):
    """What MODEL is, the SRAM and flash deploy would need against the budgets, and what to turn
    on, in order of priority, each saving measured by planning it. A language model (.safetensors):
    the --weights, --kv-cache, --context and --logits that fit the budgets, each planned, best first;
    exit status 1 when none does."""
    language = frontend_for(model, "suggest").kind == "language_model"  # a kind it does not take: a usage error
    _refuse_flags_of_the_other_kind(language, extra=frozenset({"as_json"}))
    if language:
        from .suggest import language_suggestion_json, language_suggestion_text, suggest_language_model

        if llm_tokenizer is not None:
            raise UsageError("--tokenizer: deploy suggest writes no files (the tokenizer is copied by deploy MODEL -o DIR)")
        options = _language_model_options(target, sram, flash, l3, planner, time_limit, kernels, LanguageFlags(
            weights=llm_weights, kv=llm_kv, context=llm_context, prune_vocab=llm_prune, logits=llm_logits,
            rope=llm_rope), input_memory=input_memory)
        with _progress(quiet):
            s = suggest_language_model(model, options)
        if as_json:
            click.echo(json_text(language_suggestion_json(s)))
        else:
            say(language_suggestion_text(s))
        sys.exit(0 if s.fits else 1)
    from .suggest import suggest, suggestion_json, suggestion_text

    options = _options(target, l1, sram, flash, planner, time_limit, no_in_place, tiler, tile_objective, l3,
                       patch, max_overhead, kernels, input_layout, output_layout, _input_type(model, input_type),
                       cut_inputs, cut_outputs, io, overlap=overlap, input_memory=input_memory, order=order, memory_map=memory_map, banks_for=(input_bank, output_bank))
    with _progress(quiet):
        s = suggest(model, options, with_front=with_front)
    if as_json:
        click.echo(json_text(suggestion_json(s)))
    else:
        say(suggestion_text(s))
    sys.exit(1 if s.signature.unsupported else 0)


INTEGER_RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "int32": (-2 ** 31, 2 ** 31 - 1)}


def _load_arrays(paths: tuple[Path, ...], tensors: list, flag: str) -> list[np.ndarray]:
    """.npy files, one per tensor (in the model's own layout), checked for size."""
    if len(paths) != len(tensors):
        raise UsageError(f"the model has {len(tensors)} {flag[2:]}s, {len(paths)} {flag} files given")
    arrays = []
    for p, tt in zip(paths, tensors):
        # any float, NaN and infinities included: each has a defined result at a float input
        a = load_npy(p, "an .npy array", error=UsageError, name=f"{flag} {p}", finite=False)
        if a.size != tt.elements:
            raise UsageError(f"{flag} {p}: {a.size} values, '{display(tt.name)}' {list(tt.shape)} needs {tt.elements}")
        if tt.dtype in INTEGER_RANGES:  # integers within the tensor's type, whatever the array's dtype
            lo, hi = INTEGER_RANGES[tt.dtype]
            if a.size and not (np.all(np.isfinite(a)) and np.all(a == np.floor(a)) and a.min() >= lo and a.max() <= hi):
                raise UsageError(f"{flag} {p}: '{display(tt.name)}' is {tt.dtype}: its values must be whole numbers "
                                 f"from {lo} to {hi}")
        arrays.append(a)
    return arrays


def _samples(model: Path, dep, inputs, expected_files, seeds: int):
    """What ``deploy verify`` runs: the --input files (with their --expected outputs), else the
    model's own test vectors when they ship beside it, else seeded random inputs. A graph cut
    from its file takes the file's inputs, and the engine runs what the reference computed at the cut."""
    from .test_vectors import find_vectors, to_engine_input, to_engine_output, to_model_input
    from .verify import Expected, cut_samples, verification_samples

    graph = dep.graph
    if inputs and graph.file_edges is not None:
        if expected_files:
            raise UsageError("--expected cannot check a cut graph: its outputs are the reference's values at the cut")
        whole = graph.file_view()
        arrays = _load_arrays(inputs, [whole.tensors[t] for t in whole.inputs], "--input")
        return cut_samples(dep, model, [[np.asarray(a).reshape(whole.tensors[t].shape) for a, t in
                                         zip(arrays, whole.inputs)]])
    if inputs:
        arrays = _load_arrays(inputs, [graph.tensors[t] for t in graph.inputs], "--input")
        sample = [to_engine_input(graph, i, a) for i, a in enumerate(arrays)]
        if not expected_files:
            return [sample], None
        outs = _load_arrays(expected_files, [graph.tensors[t] for t in graph.outputs], "--expected")
        return [sample], Expected("--expected files", [[to_engine_output(graph, j, y) for j, y in enumerate(outs)]])
    vectors = find_vectors(model, graph) if not graph.state() else None  # a model with state runs a stream
    if vectors is not None and vectors.outputs is None:  # their input, the reference's outputs
        say(f"note: {vectors.note}", err=True)
        sample = [to_engine_input(graph, i, x) for i, x in enumerate(vectors.inputs)]
        return ([sample], None) if graph.file_edges is None else cut_samples(
            dep, model, [[to_model_input(graph, i, x) for i, x in enumerate(sample)]])
    if vectors is not None:
        sample = [to_engine_input(graph, i, x) for i, x in enumerate(vectors.inputs)]
        return [sample], Expected(vectors.description, [[to_engine_output(graph, j, y)
                                                         for j, y in enumerate(vectors.outputs)]])
    return verification_samples(dep, model, seeds)


MAX_SEEDS = 10_000  # every sample and its outputs are held in memory at once


def _input_type(model: Path, given: str | None) -> str | None:
    from .test_vectors import model_input_type
    return model_input_type(model, given)


@main.command("verify")
@click.argument("model", type=click.Path(path_type=Path))
@budget_options
@click.option("--input", "inputs", multiple=True, type=click.Path(path_type=Path),
              help=".npy input (one per model input); default: seeded random inputs")
@click.option("--expected", "expected_files", multiple=True, type=click.Path(path_type=Path),
              help=".npy expected output (one per model output) of the --input files; default: the reference "
              "interpreter. A NaN matches only a NaN at the same element (never an integer output), an infinity "
              "only the same infinity; any other NaN or infinity is an infinite difference")
@click.option("--seeds", default=3, show_default=True, type=click.IntRange(min=1, max=MAX_SEEDS),
              help="number of seeded random inputs")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON (strict: an infinite difference "
              "is the string \"inf\")")
@click.option("--per-layer", is_flag=True, help="report the first layer whose output differs; with --qemu also "
              "each layer's instructions and estimated cycles beside the cycles the tiling cost model gives it")
@click.option("--sanitize", is_flag=True, help="build with -fsanitize=address,undefined,float-cast-overflow")
@click.option("--debug-guards", is_flag=True,
              help="a checking build: canaries around every arena buffer, checked after each layer, and bounds checks "
              "on every DMA copy (inference_run() returns INFERENCE_GUARD_FAILED)")
@click.option("--qemu", "on_qemu", is_flag=True,
              help="Cortex-M targets: cross-compile, run on the core's QEMU board, count instructions and estimate "
              "cycles from them with the core's timing table (backends/timing)")
@click.option("--clock", "clock_mhz", type=click.FloatRange(min=0, min_open=True), default=None, metavar="MHZ",
              help="with --qemu: the core clock in MHz that milliseconds are given at (default: the preset's, e.g. "
              "stm32f446 180; a generic core has none)")
@click.option("--report", type=click.Path(path_type=Path), default=None,
              help="with --qemu --per-layer: write the deployment's report.html with each layer's instructions "
              "beside its modeled cycles. " + REPORT_RULE)
@language_options
def verify_cmd(model, target, l1, sram, flash, l3, memory_map, input_bank, output_bank, patch, max_overhead, planner, time_limit, no_in_place, overlap, input_memory, order, tiler, tile_objective,
               kernels, input_layout, output_layout, input_type, cut_inputs, cut_outputs, io, inputs, expected_files, seeds, as_json, per_layer,
               sanitize, debug_guards, on_qemu, clock_mhz, report, llm_weights, llm_kv, llm_context, llm_tokenizer,
               llm_prune, llm_logits, llm_rope):
    """Build the engine with the host compiler (or for QEMU's Cortex-M board with --qemu), run it
    and compare with the reference interpreter, or with the model's own test vectors (a language
    model: seeded token sequences against the numpy executor of the same plan)."""
    language = frontend_for(model, "verify").kind == "language_model"  # a kind it does not take: a usage error
    _refuse_flags_of_the_other_kind(language, extra=VERIFY_LANGUAGE_FLAGS)
    if language:
        return _verify_llm(model, target, sram, flash, l3, planner, time_limit, kernels, debug_guards, seeds, as_json, sanitize,
                           on_qemu, clock_mhz, LanguageFlags(weights=llm_weights, kv=llm_kv, context=llm_context,
                                                             tokenizer=llm_tokenizer, prune_vocab=llm_prune,
                                                             logits=llm_logits, rope=llm_rope))
    from .qemu import instructions_per_layer, require_board_tools, trace_on_qemu, verify_on_qemu
    from .verify import first_divergence, verify

    _check_verify_target(target, on_qemu, sanitize)
    if report is not None and not (on_qemu and per_layer):
        raise UsageError("--report needs --qemu --per-layer: it shows the instructions counted per layer")
    if clock_mhz is not None and not on_qemu:
        raise UsageError("--clock needs --qemu: milliseconds come from the cycles estimated on QEMU")
    read = [("the model", model), *(("an --input file", p) for p in inputs),
            *(("an --expected file", p) for p in expected_files)]
    if report is not None:
        check_report(report, "--report", read)  # before the build and the QEMU run it would follow
    if expected_files and not inputs:
        raise UsageError("--expected needs the --input files it belongs to")
    if on_qemu:
        require_board_tools(BACKENDS[target])  # before the planner's seconds
    with _progress(False):
        options = _options(target, l1, sram, flash, planner, time_limit, no_in_place, tiler, tile_objective, l3,
                           patch, max_overhead, kernels, input_layout, output_layout, _input_type(model, input_type),
                       cut_inputs, cut_outputs, io, overlap=overlap, input_memory=input_memory, order=order, memory_map=memory_map, banks_for=(input_bank, output_bank))
        dep = deploy(model, replace(options, debug_guards=debug_guards))
    samples, expected = _samples(model, dep, inputs, expected_files, seeds)
    result = verify_on_qemu(dep, model, samples, expected, clock_mhz) if on_qemu else \
        verify(dep, model, samples, sanitize=sanitize, expected=expected)
    if per_layer:
        trace = trace_on_qemu(dep, samples[0]) if on_qemu else None
        result["first_divergence"] = first_divergence(dep, model, samples[0], trace,
                                                      expected.tensors[0] if expected and expected.tensors else None)
        if on_qemu:
            from .profile import layer_times, per_layer_json
            if "estimated_cycles" in result:
                from .cycles import layer_profile
                times = layer_times(dep, *layer_profile(dep, samples[0]))
            else:
                times = layer_times(dep, instructions_per_layer(dep, samples[0]))
            result["per_layer"] = per_layer_json(times, result.get("clock_mhz"))
            if report is not None:
                from .pipeline import deployment_problem
                from .report_html import deployment_report
                estimate = {k: result[k] for k in ("clock_mhz", "clock_source", "cycle_model") if k in result}
                write_report(report, deployment_report(dep, deployment_problem(dep), times=times,
                                                       estimate=estimate or None), "--report", read)
    exact = all(o["max_abs_diff"] == 0 for o in result["outputs"])
    if as_json:
        click.echo(json_text(result))
    else:
        for o in result["outputs"]:
            say(f"output {o['index']}: max |diff| = {o['max_abs_diff']:g} over {o['elements']} "
                       f"elements x {result['samples']} inputs vs {result['reference']}")
        if per_layer:
            d = result["first_divergence"]
            scope = ""
            if dep.graph.state():  # over a stream only where first_divergence ran one (see there)
                streamed = not on_qemu and dep.graph.file_edges is None and model.suffix.lower() != ".onnx"
                scope = " (over a stream of three, reset before the third)" if streamed else \
                    " (its first inference, from the reset state)"
            if d["layer"] is None:
                say(f"every layer matches{scope}")
            else:
                at = f" at inference {d['inference']}" if "inference" in d else ""
                say(f"first divergence{at}: op {d['layer']} {d['op']} '{display(d['name'])}': C vs golden "
                           f"{d['c_vs_golden']:g}, C vs reference {d['c_vs_reference']}, "
                           f"golden vs reference {d['golden_vs_reference']}")
        if on_qemu:
            say(qemu_summary(result))
            if "estimated_cycles" in result:
                from .cycles import timing_text
                say(timing_text(result))
            if per_layer:
                from .profile import per_layer_table
                say(per_layer_table(times, result.get("clock_mhz")))
        say("bit-exact" if exact else "MISMATCH")
    sys.exit(0 if exact else 1)


def _verify_llm(model, target, sram, flash, l3, planner, time_limit, kernels, debug_guards, seeds, as_json, sanitize, on_qemu,
                clock_mhz, language) -> None:
    """deploy verify of a language model: its engine against the executor, byte for byte."""
    from .verify_llm import verify_language_model

    _check_verify_target(target, on_qemu, sanitize)
    if clock_mhz is not None and not on_qemu:
        raise UsageError("--clock needs --qemu: milliseconds come from the cycles estimated on QEMU")
    options = _language_model_options(target, sram, flash, l3, planner, time_limit, kernels, language,
                                      debug_guards=debug_guards)
    with _progress(False):
        dep = deploy(model, options)
    result = verify_language_model(dep, seeds, sanitize=sanitize, on_qemu=on_qemu, clock_mhz=clock_mhz)
    if as_json:
        click.echo(json_text(result))
    else:
        for o in result["outputs"]:
            what = "ids that differ" if dep.graph.activation(o["name"]).dtype == "int32" else "max |diff|"
            say(f"output {o['index']} ({o['name']}): {what} = {o['max_abs_diff']:g} over {o['elements']} elements x "
                f"{result['tokens']} tokens x {result['samples']} sequences vs {result['reference']}")
        if on_qemu:
            say(f"QEMU {result['qemu_machine']}: {result['instructions']:,} instructions for the token at position 1, "
                f"{result['instructions_per_mac']:.2f} per MAC ({result['macs']:,} MACs in its matrices)\n"
                f"ELF flash {result['flash_bytes']:,} B (planned {result['planned_flash_bytes']:,} B), SRAM "
                f"{result['sram_bytes']:,} B (planned {result['planned_sram_bytes']:,} B); the ELF's include the QEMU "
                f"harness and its stack")
            if "estimated_cycles" in result:
                from .cycles import timing_text
                say(timing_text(result))
        say("bit-exact" if result["exact"] else "MISMATCH")
    sys.exit(0 if result["exact"] else 1)


def _check_verify_target(target: str, on_qemu: bool, sanitize: bool) -> None:
    backend = BACKENDS.get(target)  # an unknown name is deploy()'s error
    if on_qemu:
        if backend is not None and backend.qemu_machine is None:
            qemu_targets = ", ".join(n for n, b in BACKENDS.items() if b.qemu_machine)
            raise UsageError(f"--qemu: target '{target}' has no QEMU board (targets that have one: {qemu_targets})")
        if sanitize:
            raise UsageError("--sanitize builds with the host gcc: not with --qemu")
    elif backend is not None and not backend.runs_on_host and backend.emulation is None:
        qemu_hint = f", or --qemu to run it on QEMU's {backend.qemu_machine}" if backend.qemu_machine else ""
        raise UsageError(f"deploy verify runs engines on this machine, and '{target}' engines need a board: "
                         f"use --target host (the same tile schedules with --l1){qemu_hint}")


def qemu_summary(result: dict) -> str:
    """The instruction count and the ELF's memory of ``deploy verify --qemu``, for people."""
    return (f"QEMU {result['qemu_machine']}: {result['instructions']:,} instructions per inference, "
            f"{result['instructions_per_mac']:.2f} per MAC ({result['macs']:,} MACs)\n"
            f"ELF flash {result['flash_bytes']:,} B (planned {result['planned_flash_bytes']:,} B), "
            f"SRAM {result['sram_bytes']:,} B (planned {result['planned_sram_bytes']:,} B); "
            f"the ELF's include the QEMU harness and its stack")


@main.command("compare")
@click.argument("model", type=click.Path(path_type=Path))
@budget_options
@click.option("--report", type=click.Path(path_type=Path), default=Path("report.html"), show_default=True,
              help="where to write the HTML report. " + REPORT_RULE)
@click.option("--tiling", is_flag=True, help="compare the CP-SAT and greedy tilers layer by layer instead")
@language_options
def compare_cmd(model, target, l1, sram, flash, l3, memory_map, input_bank, output_bank, patch, max_overhead, planner, time_limit, no_in_place, overlap, input_memory, order, tiler, tile_objective,
                kernels, input_layout, output_layout, input_type, cut_inputs, cut_outputs, io, report, tiling, llm_weights,
                llm_kv, llm_context, llm_tokenizer, llm_prune, llm_logits, llm_rope):
    """Plan MODEL's arena with every planner: a table, and report.html with one picture each (a
    language model: the activations of one token, the KV cache beside them)."""
    language = frontend_for(model, "compare").kind == "language_model"  # a kind it does not take: a usage error
    _refuse_flags_of_the_other_kind(language, extra=frozenset({"report"}))
    if language:
        from .compare import compare_language_model, comparison_table, language_model_report_html, \
            language_model_sram_lines
        from solver.arena import SolverConfig, lower_bound

        if llm_tokenizer is not None:
            raise UsageError("--tokenizer: deploy compare writes no engine (the tokenizer is copied by deploy MODEL -o DIR)")
        options = _language_model_options(target, sram, flash, l3, planner, time_limit, kernels, LanguageFlags(
            weights=llm_weights, kv=llm_kv, context=llm_context, prune_vocab=llm_prune, logits=llm_logits,
            rope=llm_rope), input_memory=input_memory)
        check_report(report, "--report", [("the model", model)])
        with _progress(False):
            dep, problem, plans = compare_language_model(model, options, SolverConfig(time_limit_s=time_limit))
        say(comparison_table(plans, lower_bound(problem), problem))
        for line in language_model_sram_lines(dep, plans):
            say(line)
        write_report(report, language_model_report_html(dep, problem, plans), "--report", [("the model", model)])
        say(f"wrote {report}")
        return
    if not tiling:  # --tiling writes no report
        check_report(report, "--report", [("the model", model)])
    front_options = (input_layout, output_layout, _input_type(model, input_type),
                       cut_inputs, cut_outputs, io)
    if tiling:
        _compare_tiling(model, _options(target, l1, sram, flash, "first-fit", time_limit, no_in_place, "greedy",
                                        tile_objective, l3, patch, max_overhead, kernels, *front_options,
                                        overlap=overlap, input_memory=input_memory, order=order, memory_map=memory_map, banks_for=(input_bank, output_bank)))
        return
    from .compare import compare_planners, comparison_table, live_bytes
    from .report_html import planners_report
    from .pipeline import deployment_problem, plan_deployment
    from solver.arena import SolverConfig, lower_bound

    options = _options(target, l1, sram, flash, planner, time_limit, no_in_place, tiler, tile_objective, l3,
                       patch, max_overhead, kernels, *front_options, overlap=overlap, input_memory=input_memory, order=order, memory_map=memory_map, banks_for=(input_bank, output_bank))
    with _progress(False):
        # the plan deploy makes with these flags (its split, tiles, in-place, L3), budgets and all;
        # only its L2 arena is planned again, by every planner
        dep = plan_deployment(model, options)
        problem = deployment_problem(dep)
        plans = compare_planners(problem, config=SolverConfig(time_limit_s=time_limit))
    say(comparison_table(plans, lower_bound(problem), problem))
    before, patch_line = None, None
    if dep.patches:
        from .suggest import stages_text
        whole = plan_deployment(model, replace(options, patch="off"))
        patch_line = (f"Patch stages ({dep.fusion.method}): {stages_text(dep)}; arena without them "
                      f"{whole.memory.arena_bytes:,} B, with them {dep.memory.arena_bytes:,} B.")
        say(patch_line)
        before = live_bytes(deployment_problem(whole))
    sram = dep.options.sram  # the flag, or the part's own
    if sram is not None:
        rest = dep.memory.sram_bytes - dep.memory.arena_bytes  # what SRAM holds beside the arena
        for p in plans:
            need = rest + p.peak
            say(f"{p.method:<14} {need:>12,} B of SRAM  {'fits' if need <= sram else 'OVER'} --sram {sram:,}")
    html = planners_report(dep.graph.name, problem, plans, live_bytes(problem), before, patch_line)
    write_report(report, html, "--report", [("the model", model)])
    say(f"wrote {report}")


def _compare_tiling(model, options) -> None:
    from .compare import tiling_table
    from .pipeline import plan_deployment, tile_layers

    if options.l1 is None and BACKENDS[options.target].l1_bytes is None:
        raise UsageError("--tiling needs an L1 budget: pass --l1")
    greedy = plan_deployment(model, options)  # as deploy plans it (budgets kept, no budget error)
    cpsat = tile_layers(greedy.but(options=replace(greedy.options, tiler="cpsat")))
    rows = [(k, greedy.graph.layers[k].op, greedy.tilings[k][1], cpsat[k][1]) for k in sorted(greedy.tilings)]
    say(tiling_table(rows))


@main.command("sweep")
@click.argument("models", nargs=-1, type=click.Path(path_type=Path))
@click.option("-o", "--output", "out_dir", type=click.Path(path_type=Path), default=Path("sweep"), show_default=True,
              help="the sweep's folder: journal, results.parquet, results.csv, report.html (a rerun resumes it)")
@click.option("--file", "sweep_file", type=click.Path(path_type=Path), default=None,
              help="a sweep file (JSON or TOML: models, verify, axes); flags given override its axes")
@click.option("--target", default=None, help="targets, e.g. stm32f446,nrf52840,stm32h743")
@click.option("--sram", default=None, help="SRAM budgets: a list (none,128K) or a range (64K..512K:x2, 64K..256K:+64K)")
@click.option("--flash", default=None, help="flash budgets, as --sram")
@click.option("--l1", default=None, help="L1 budgets, as --sram (none: the part's own or untiled)")
@click.option("--l3", default=None, help="L3 budgets, as --sram")
@click.option("--planner", default=None, help=f"arena planners ({', '.join(PLANNERS)})")
@click.option("--tiler", default=None, help="tilers (cpsat, greedy)")
@click.option("--patch", default=None, help="patch settings (auto, off, RxC@LAYER)")
@click.option("--kernels", default=None, help=f"kernel families ({', '.join(KERNELS)})")
@click.option("--order", default=None, help="operator orders (auto, file)")
@click.option("--verify", type=click.Choice(("none", "host", "qemu")), default=None,
              help="check each fitting point: bit-exact on this machine, or on QEMU with its instructions "
                   "(default: the file's, else none)")
@click.option("--jobs", type=click.IntRange(min=1, max=4096), default=None,
              help="processes (default: every core; 1 runs the points here, one after the other)")
@click.option("--ray", "ray_address", default=None,
              help="run the points on a Ray cluster: its address, auto, or local (a Ray instance started here)")
@click.option("--json", "as_json", is_flag=True, help="print a JSON summary")
@click.option("-q", "--quiet", is_flag=True, help="no progress on stderr")
def sweep_cmd(models, out_dir, sweep_file, target, sram, flash, l1, l3, planner, tiler, patch, kernels, order, verify,
              jobs, ray_address, as_json, quiet):
    """Deploy models over targets, budgets and solvers; one row per point in a table, a report of
    the Pareto fronts and the smallest part that fits."""
    from .sweep.axes import read_spec
    from .sweep.run import run_sweep
    from solver import progress

    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise UsageError("deploy sweep writes Parquet tables with pyarrow: pip install -e '.[sweep]'") from None
    flags = dict(target=target, sram=sram, flash=flash, l1=l1, l3=l3, planner=planner, tiler=tiler, patch=patch,
                 kernels=kernels, order=order)
    spec = read_spec(tuple(models), flags, sweep_file, verify)
    jobs = jobs or os.cpu_count() or 1
    executor = "ray" if ray_address else ("serial" if jobs == 1 else "pool")
    started = time.perf_counter()
    listener = progress.Silent() if quiet or as_json else progress.for_stream(sys.stderr)
    with progress.reporting(listener), progress.step("sweep", total=spec.size) as bar:
        failed = 0

        def heard(row, fresh):
            nonlocal failed
            failed += row["status"] == "failed"
            bar.advance()
            bar.note = f"{failed} failed" if failed else ""
        try:
            outcome = run_sweep(spec, out_dir, executor, jobs, ray_address, heard)
        except KeyboardInterrupt:  # the journal keeps every finished point
            report_error(None, f"interrupted; {bar.done} of {spec.size} points are in {out_dir}'s journal: "
                               f"the same command resumes the sweep", 130, as_json)
            sys.exit(130)
    rows = outcome.rows
    counts = {s: sum(r["status"] == s for r in rows) for s in ("fits", "over budget", "failed")}
    if as_json:
        click.echo(json_text({"output": str(out_dir), "points": len(rows), "computed": outcome.computed,
                              "reused": outcome.reused, "executor": executor, **counts,
                              "wall_s": round(time.perf_counter() - started, 3)}))
    elif not quiet:
        say(f"{len(rows):,} points ({outcome.computed:,} run, {outcome.reused:,} from the journal): {counts['fits']:,} fit, "
            f"{counts['over budget']:,} over budget, {counts['failed']:,} failed")
        say(f"wrote {out_dir}/results.parquet, results.csv and report.html in {time.perf_counter() - started:.1f} s")


@main.command("targets")
@click.option("--json", "as_json", is_flag=True, help="print the targets as a JSON list")
def targets_cmd(as_json):
    """List the targets: memories, kernels and the QEMU board each runs on."""
    infos = [target_info(b) for b in BACKENDS.values()]
    click.echo(json_text(infos) if as_json else targets_table(infos))


@main.command("ops")
@click.option("--json", "as_json", is_flag=True, help="print the table as JSON")
def ops_cmd(as_json):
    """List the supported operators: types, and whether each tiles, runs in patches, runs in place
    and has DSP kernels on a target."""
    from .ops_table import ops_json, ops_text
    click.echo(json_text(ops_json()) if as_json else ops_text())


if __name__ == "__main__":
    main()
