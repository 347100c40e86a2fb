"""The text of `akka training runs start --dry-run`: envelope, Lengths, diagnostics, and (--show-resolved) every
setting with its source."""

from __future__ import annotations

from typing import Any

from optimize.cli.render import DASH
from optimize.core.paths import lookup
from optimize.schemas.resolved import ResolvedReinforcement, resolved_config, resolved_execution

SOURCES = {"stated": "stated", "default": "default", "defaultKernels": "default kernels",
           "memoryEstimate": "memory estimate"}


def render_dry_run(con, d: dict[str, Any], show_resolved: bool) -> None:
    con.print(f"[bold]Dry run[/]: nothing was started. The run would be admitted into project {d['project']} and "
              f"register its model as {d['project']}/{d['modelName']}.")
    con.print(f"Base model   {d['baseModel']['id']} at {d['baseModel']['commit'][:12]}")
    if d.get("source"):
        con.print(f"Source       the run trains {d['source']['model']} (its weights and LoRA settings), with a fresh "
                  "optimizer")
    envelope = d["envelope"]
    if envelope["status"] == "measured":
        con.print(f"Envelope     inside a measured envelope ({envelope['mode']} catalog)")
    for warning in d["warnings"]:
        con.print(f"[yellow]Warning[/]      {warning}")
    if d.get("memory"):
        con.print(f"Memory       {memory_line(d['memory'])}", markup=False)
    if (estimate := d.get("estimate")) and estimate.get("seconds"):
        mfu = d.get("expectedMfu")
        expected = f"; expected MFU {mfu['value']:.1%} ({mfu['basis']} over {mfu['device']}'s " \
                   f"{mfu['peakTflops']:g} TFLOP/s bf16)" if mfu else ""
        con.print(f"Estimate     {estimate['steps']:,} updates, {estimate['tokens']:,} tokens, about "
                  f"{estimate['seconds']:,.0f} s of training{expected}", markup=False)
    if (estimate := d.get("estimate")) and (packed := estimate.get("packing")) and packed.get("bins"):
        con.print(f"Packing      {packed['rows']:,} rows in {packed['bins']:,} bins of {packed['binTokens']:,} "
                  f"tokens, {packed['efficiency']:.1%} of their tokens the rows' own", markup=False)
    if d["resolved"].get("execution") and resolved_execution(d["resolved"]).share_base:
        con.print(f"Shared base  trains in one worker beside the runs of {d['project']} queued with it over this base "
                  "that state execution.shareBase, each its own adapter")
    # the resolved plan, read into its model (a dry run that answers none shows no rollout or reward sections)
    config = resolved_config(d["resolved"]["config"]) if d["resolved"].get("config") else None
    rl = config.rl_hyperparams if isinstance(config, ResolvedReinforcement) else None
    if rl is not None:  # a reinforcement run: how it rolls out, and what its terms make of the rows' own answers
        con.print(f"Rollouts     klBeta {rl.kl_beta:g}, temperature {rl.temperature:g}, {rl.generations} "
                  f"generations per prompt, completions up to {rl.max_completion_length} tokens, "
                  f"{rl.importance_sampling}-level importance sampling")
        con.print(f"[bold]Reward[/] ({config.reward.aggregation} of the terms; each scored on the first rows' own "
                  "answers)")
        for term, check in zip(config.reward.terms, d.get("rewardCheck") or [], strict=False):
            if check.get("note"):
                con.print(f"  {term.name} ({term.kind}, weight {term.weight:g})  {check['note']}", markup=False)
                continue
            mean = DASH if check["mean"] is None else f"{check['mean']:.3f}"
            spread = "" if check["std"] is None else f" ± {check['std']:.3f}"
            errors = "; ".join(f"line {e['line']}: {e['error']}" for e in check["firstErrors"])
            con.print(f"  {term.name} ({term.kind}, weight {term.weight:g})  mean {mean}{spread} over "
                      f"{check['scored']} of {check['rows']} rows" + (f"; {check['errors']} error(s): {errors}"
                                                                       if check["errors"] else ""))
        _groups(con, d.get("groupsCheck"))
        _rollout_estimates(con, d.get("estimates"))
    con.print("[bold]Lengths[/]")
    if rl is not None and not d["resolved"]["lengths"]:
        budget = config.max_seq_length - rl.max_completion_length
        con.print(f"  each prompt may hold {budget} tokens (maxSeqLength less maxCompletionLength), checked as the "
                  "run renders it")
    for section in d["resolved"]["lengths"]:
        _lengths(con, section)
    if d["diagnostics"]:  # of JSON rows (prepared token rows have none)
        con.print("[bold]Diagnostics[/]")
    for item in d["diagnostics"]:
        _diagnostics(con, item)
    if show_resolved:
        con.print("[bold]Resolved settings[/]")
        for path, source in sorted(d["resolved"]["sources"].items()):
            con.print(f"  {path} = {lookup(d['resolved'], path)!r} ({SOURCES[source]})")


def memory_line(m: dict[str, Any]) -> str:
    """The predicted peak per device (and, once a run has ended on a GPU, the measured one against it)."""
    p = m.get("predicted")
    if not p:
        return m["basis"]
    device = f" of {m['deviceMemoryGiB']:g} GiB" if m.get("deviceMemoryGiB") else ""
    text = (f"predicted peak {p['peakGiB']:g} GiB per device{device} (weights {p['weightsGiB']:g}, adapter state "
            f"{p['adapterStateGiB']:g}, activations {p['activationsGiB']:g} for {p['tokensPerPass']:,} tokens a pass, "
            f"gradient checkpointing {'on' if p['gradientCheckpointing'] else 'off'}; {m['basis']})")
    if (p.get("shards") or 1) > 1:
        text = text.replace(" per device", f" per device, sharded over {p['shards']} devices", 1)
    if p.get("generationGiB") is not None:
        text += f"; {p['generationGiB']:g} GiB while vLLM generates beside the model (its share of the device)"
    if m.get("checkpointingReason"):
        text += f"; checkpointing {'on' if p['gradientCheckpointing'] else 'off'}: {m['checkpointingReason']}"
    if m.get("shardingReason"):
        text += f"; sharding {'fsdp' if (p.get('shards') or 1) > 1 else 'ddp'}: {m['shardingReason']}"
    if m.get("measuredGiB") is not None:
        text += f"; measured {m['measuredGiB']:g} GiB allocated"
        if m.get("reservedGiB") is not None:
            text += f", {m['reservedGiB']:g} reserved"
        if m.get("ratio") is not None:
            text += f" ({m['ratio']:.2f}x the prediction)"
        if m.get("startCheckGiB") is not None:
            text += f"; start checks peaked at {m['startCheckGiB']:g} GiB"
    return text


def _rollout_estimates(con, e: dict[str, Any] | None) -> None:
    """A reinforcement run's size: updates, rollouts and, where measured, tokens and time."""
    if not e:
        return
    r = e["rollouts"]
    con.print(f"Estimate     {e['steps']} updates ({e['stepsPerEpoch']} per epoch), each rolling out "
              f"{r['promptsPerUpdate']} prompts x {r['completionsPerUpdate'] // max(r['promptsPerUpdate'], 1)} = "
              f"{r['completionsPerUpdate']} completions: {r['completions']:,} completions, at most "
              f"{r['mostCompletionTokens']:,} generated tokens", markup=False)
    scaled = f"; {e['scale']['basis']}, {e['unscaledSeconds']:g}s unscaled" if e.get("scale") else ""
    timing = (f"{e['tokens']:,} tokens, about {e['seconds']:g}s of training ({e['basis']}{scaled})"
              if e.get("seconds") is not None else
              f"{e['tokens']:,} tokens; {e['basis']}" if e.get("tokens") is not None else e["basis"])
    con.print(f"             {timing}", markup=False)


def _groups(con, g: dict[str, Any] | None) -> None:
    """How often the reward would not vary within a prompt's group, on answers sampled from the starting model."""
    if not g:
        return
    if g["evaluationId"] is None:
        con.print(f"Groups       not measured: no sampling evaluation of {g['model']} on this dataset version; make "
                  f"one with: {g['command']}", markup=False)
        return
    share = DASH if g["zeroVarianceShare"] is None else f"{g['zeroVarianceShare']:.0%}"
    mean = DASH if g["meanReward"] is None else f"{g['meanReward']:.3f}"
    left_out = f"; its judge terms left out: {', '.join(g['leftOut'])}" if g.get("leftOut") else ""
    con.print(f"Groups       reward constant on {share} of {g['groups']} prompt groups, mean reward {mean} — the run's "
              f"reward on {g['answers']} answers sampled from {g['model']} ({g['generations']} per prompt at "
              f"temperature {g['temperature']:g}, evaluation {g['evaluationId'][:12]}){left_out}", markup=False)


def _lengths(con, s: dict[str, Any]) -> None:
    head = f"  {s['dataset']} ({s['role']}), maxSeqLength {s['maxSeqLength']}:"
    status = s["status"]
    if status == "done":
        con.print(f"{head} analysis {s['analysisId'][:12]}, tokenizer {s['tokenizer']['repository']} at "
                  f"{s['tokenizer']['commit'][:12]}, chat template {s['chatTemplate']['sha256'][:12]} "
                  f"({s['chatTemplate']['source']}), Optimize {s['optimizeVersion']}")
        con.print(f"    {s['rows']} {s.get('unit', 'rows')}; median {s['median']}, p90 {s['p90']}, p99 {s['p99']}, "
                  f"longest {s['longest']}; "
                  f"{s['overMaxSeqLength']} longer than maxSeqLength; suggested maxSeqLength "
                  f"{s['suggestedMaxSeqLength']}")
        if "cannotFitTrimmed" in s:
            unmeasured = (f"; {s['trimUnmeasured']} of {s['trimMeasuredFrom']} tokens or fewer are trimmed when the "
                          "run reads them"
                          if s.get("trimUnmeasured") else "")
            con.print(f"    {s['trimmed']} long row(s) trimmed; {s['cannotFitTrimmed']} cannot fit even trimmed"
                      f"{unmeasured}")
        if s["findingCount"]:
            con.print(f"    {s['findingCount']} row(s) the chat template refuses or renders without a part")
        return
    con.print(f"{head} {s.get('note') or s.get('reason') or status}")
    if s.get("command"):
        con.print(f"    {'try it again' if status == 'failed' else 'start one'} with: {s['command']}")
    elif s.get("log"):
        con.print(f"    another attempt would fail the same way; its worker's log: {s['log']}")


def _diagnostics(con, item: dict[str, Any]) -> None:
    coverage = item["coverage"]
    if not coverage["complete"]:
        con.print(f"  note: {coverage['note']}")  # printed before the findings it qualifies
    duplicates = item["duplicates"]
    named = ", ".join(f"line {r['line']} = line {r['sameAs']}" for r in duplicates["rows"])
    con.print(f"  {item['dataset']}: {coverage['read']} of {coverage['total']} examples read; "
              f"{duplicates['count']} duplicate(s){': ' + named if named else ''}")
    shapes = ", ".join(f"{s['shape']} {s['rows']}" for s in item["shapes"]) or DASH
    con.print(f"    shapes: {shapes}")
