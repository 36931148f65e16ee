"""Reading the trainer benchmarks' event files (one JSON object a line, as eft-train writes to
EFT_EVENTS_FD and torch_loop.py to --events): steps, tokens/s and the step timeline.
Shared by compare.sh and lora_bench.sh."""
import json
import statistics

WARMUP_STEPS = 2  # a run's first steps fill caches and allocators: left out of its speed


def events(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def steps(path):
    """The run's step events after the warm-up (torch_loop.py's events carry no "event" key)."""
    return [e for e in events(path) if e.get("event", "step") == "step" and "tokens_per_s" in e][WARMUP_STEPS:]


def run_tps(path):
    """A run's tokens/s: the median of its steps."""
    return statistics.median(e["tokens_per_s"] for e in steps(path))


def timeline(paths, keys):
    """Medians over the runs' steps of eft-train's per-step timeline fields, "a / b / c"."""
    s = [e for p in paths for e in steps(p)]
    if not s or keys[0] not in s[0]:
        return "-"
    return " / ".join(f"{statistics.median(e[k] for e in s):.2f}" for k in keys)


def median_range(values, fmt=",.0f"):
    """ "median (min-max)" """
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"
