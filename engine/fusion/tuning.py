"""MetaSchedule tuning under a budget, spent where the time goes, through the record store.

Plain MetaSchedule spreads trials over every task (measured here: 1,023 trials on a
ResNet-50 left 24 of 49 tasks untouched and the model 50x slower than onnxruntime). So:

1. Every kernel first gets our default schedule (``schedules``) and is timed on the
   worker; those times are the baseline and the weights.
2. Records for known workloads come from the store and are used without tuning. A
   workload settled under a budget at least as large as this run's (tuned, whether or
   not that beat the default, or left out as too light) is not considered again: a
   second compile of the same workloads with the same budget tunes nothing.
3. The remaining kernels that make up 95% of the time are tuned, with task weights
   equal to their share of the latency, within ``trials`` and/or ``minutes``; a stored
   record seeds the search of a workload tuned again under a larger budget.
4. A tuned schedule replaces the default only where it measured faster, and the
   outcome (best record, default and tuned time, budget) goes back to the store.
5. ``compile_model`` then times the whole model with the tuned kernels and with the
   defaults, keeps the faster build and stores that outcome under the set of tuned
   kernels (:func:`tuned_set_key`): kernels faster alone can make the model slower.

Progress reports trials, tasks done and the estimated model latency so far; raising
:class:`engine.errors.Cancelled` from the progress callback stops tuning and propagates.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import Cancelled, ProgressFn
from engine.fusion.build import build_segment
from engine.fusion.timing import kernel_times_us
from engine.fusion.tuning_store import RecordStore, target_key
from engine.fusion.workloads import workload_key, workload_module

_TIME_SHARE_TUNED = 0.95
_MIN_GAIN = 0.95  # a tuned kernel must be at least 5% faster than the default schedule
_TRIALS_PER_ITER = 8
# Sizes the task count (budget trials / _TRIALS_PER_TASK), not the trials themselves: a
# trial took ~2 s when this was set and takes 0.5-1 s now, but sizing from that (25 tasks
# instead of 18 for ResNet-50 in 20 minutes) gained less per model (1.04x against 1.07x,
# bench/results/compile_bench_resnet50_20min_tasks.json): fewer, longer tasks do better.
_TRIALS_PER_MINUTE = 30
# A minutes-only budget still needs trial caps for MetaSchedule: per task, this many
# (small models stop early instead of measuring one kernel for the whole budget).
_MAX_TRIALS_PER_TASK = 512
_BUILD_TIMEOUT_S = 60.0  # per candidate; twice MetaSchedule's default, for a loaded machine
BUILD_TIMEOUT_S = _BUILD_TIMEOUT_S
_TRIALS_PER_TASK = 32  # at least 4 search rounds per tuned task, or it rarely beats ours
# MetaSchedule's defaults (population 512, 4 genetic rounds) cost ~15 s of search per
# trial on one shared core; a small population leaves the budget for measuring.
_SEARCH = {"population_size": 64, "init_min_unmeasured": 16, "genetic_num_iters": 2}


@dataclass(frozen=True)
class TuningBudget:
    trials: int = 0
    minutes: float = 0.0

    @property
    def active(self) -> bool:
        return self.trials > 0 or self.minutes > 0


@dataclass
class _Workload:
    key: str
    name: str  # a kernel function name that has this workload
    mod: object  # IRModule({"main": PrimFunc})
    calls: int = 0
    default_us: float | None = None  # per call, default schedule
    tuned_us: float | None = None  # per call, best tuned schedule known
    record: str | None = None  # the JSON of that schedule's MetaSchedule tuning record
    chosen: object = None  # its PrimFunc, when it beat the default
    budget_trials: int = 0  # the largest budget it was settled under
    trials: int = 0  # trials measured for it in this run
    # per call in the model, default and tuned schedule, timed in alternating rounds; the
    # tuned one ships only if faster there too (see :func:`_check_in_model`)
    in_model: dict | None = None
    # its segment's default build ran and was timed: ``calls`` is what the model launches
    # (0: a kernel the model never launches, e.g. one only the weights' prepacking calls)
    timed: bool = False


def tune_segments(
    segments,
    spec,
    store: RecordStore,
    budget: TuningBudget,
    progress: ProgressFn,
    build_timeout_s: float,
    builder=None,
):
    """Returns (summary, {workload key: tuned PrimFunc}) for :func:`build.build_segment`.
    A segment whose default build does not finish in ``build_timeout_s`` is not tuned.
    ``builder`` builds the candidates (a MetaSchedule Builder, e.g. one that spreads them
    over other workers); None: a LocalBuilder on this machine."""
    import tvm

    from engine.fusion.lowering import fuse_tir

    target = spec.tvm_target()
    tkey = target_key(spec.target, tvm.__version__)
    workloads: dict[str, _Workload] = {}
    modules = []
    for seg in segments:
        mod = fuse_tir(seg.fused, target)
        modules.append((seg, mod))
        for gv, func in mod.functions.items():
            if isinstance(func, tvm.tirx.PrimFunc) and not _hand_written(func):
                wmod = workload_module(func)
                key = workload_key(wmod)
                workloads.setdefault(key, _Workload(key, gv.name_hint, wmod))
    found, reused = _load_records(workloads, store, tkey)
    summary = {
        "enabled": True,
        "target_key": tkey,
        "workloads": len(workloads),
        "records_found": found,
        "records_used": reused,
        "trials": 0,
        "tasks_tuned": 0,
        "seconds": 0.0,
    }
    affordable = budget.trials or math.ceil(budget.minutes * _TRIALS_PER_MINUTE)
    if not any(w.budget_trials < affordable for w in workloads.values()):
        summary["in_model"] = _check_in_model(
            modules, spec, workloads, store, tkey, progress, build_timeout_s
        )
        summary["improved"] = sum(1 for w in workloads.values() if w.chosen is not None)
        summary["records_used"] = summary["improved"]
        summary["kernels"] = _per_kernel(workloads)
        return summary, _chosen(workloads)
    progress(0.0, "timing kernels with default schedules")
    for w in workloads.values():
        w.default_us = None  # measured again on this machine, now
    for seg, mod in modules:
        _time_defaults(seg, mod, spec, workloads, build_timeout_s)
    pending = [w for w in workloads.values() if w.budget_trials < affordable]
    todo = _select(pending, max(1, affordable // _TRIALS_PER_TASK))
    started = time.perf_counter()
    devices: dict[str, int] = {}
    trials = _run(todo, workloads, spec, target, budget, progress, devices, builder)
    summary.update(
        trials=trials, tasks_tuned=len(todo), seconds=round(time.perf_counter() - started, 1)
    )
    built_by = getattr(getattr(builder, "_inst", builder), "builds_by_worker", None)
    if built_by:  # candidates built on other workers too (jobs.builds)
        summary["builds_by_worker"] = dict(built_by)
    if spec.remote is not None:
        summary["measured_on"] = {
            "key": spec.remote.key,
            "tracker": spec.remote.tracker,
            "measurements_by_device": devices,
        }
    tuned = {w.key for w in todo}
    for w in pending:
        # A kernel left out (too light for this budget) is settled at this budget as well,
        # and so is one the model never launches (timed: no calls, no time, nothing to
        # tune; unsettled, it had every later compile build and time the defaults again);
        # one whose tuning never started (out of time), or whose build failed, is not.
        if (w.default_us is not None or w.timed) and (w.trials or w.key not in tuned):
            w.budget_trials = affordable
            store.put(tkey, w.key, _entry(w, spec))
    summary["in_model"] = _check_in_model(
        modules, spec, workloads, store, tkey, progress, build_timeout_s
    )
    summary["improved"] = sum(1 for w in workloads.values() if w.chosen is not None)
    summary["estimated_default_ms"] = _estimate(workloads, tuned=False)
    summary["estimated_tuned_ms"] = _estimate(workloads, tuned=True)
    summary["kernels"] = _per_kernel(workloads)
    return summary, _chosen(workloads)


def _per_kernel(workloads) -> list[dict]:
    """Per tuned workload: a kernel that has it, its calls, and its time per call with the
    default schedule and with the schedule the build uses (measured; heaviest first)."""
    rows = [
        {
            "kernel": w.name,
            "calls": w.calls,
            "default_us": w.default_us,
            "tuned_us": w.tuned_us if w.chosen is not None else None,
            "trials": w.trials,
            "in_model": w.in_model,
        }
        for w in workloads.values()
    ]
    return sorted(rows, key=lambda r: -((r["default_us"] or 0.0) * (r["calls"] or 1)))


def _chosen(workloads) -> dict:
    return {k: w.chosen for k, w in workloads.items() if w.chosen is not None}


def _load_records(workloads, store, tkey: str) -> tuple[int, int]:
    """Fill workloads from their store entries; (entries found, tuned schedules applied)."""
    found = used = 0
    for w in workloads.values():
        entry = store.get(tkey, w.key)
        if not entry:
            continue
        try:
            default_us, tuned_us = entry.get("default_us"), entry.get("tuned_us")
            budget_trials = int(entry.get("budget_trials") or 0)
            record = next(iter(entry.get("records") or []), None)
            in_model = entry.get("in_model")
            if not (record and in_model and in_model.get("record") == _digest(record)):
                in_model = None  # none, or of another record: checked again
            faster = (
                _beats(in_model["tuned_us"], in_model["default_us"])
                if in_model
                else _beats(tuned_us, default_us)
            )
            chosen = None
            if record is not None and faster:
                if _TENSORIZE in record:  # the trace names a tensor intrinsic
                    _import_tensor_intrinsics()
                chosen = _apply_trace(w.mod, _parse_record(record, w.mod).trace)
        except Exception:  # noqa: BLE001 - a damaged or foreign record: tune as if none
            continue
        found += 1
        w.default_us, w.tuned_us, w.budget_trials = default_us, tuned_us, budget_trials
        w.record, w.chosen, w.in_model = record, chosen, in_model
        used += chosen is not None
    return found, used


def _parse_record(text: str, mod, database=None):
    import tvm
    from tvm.s_tir import meta_schedule as ms

    workload = database.commit_workload(mod) if database else ms.database.Workload(mod)
    return ms.database.TuningRecord.from_json(tvm.ir.load_json(text), workload)


def _apply_trace(mod, trace):
    import tvm

    sch = tvm.s_tir.Schedule(mod)
    trace.apply_to_schedule(sch, remove_postproc=False)
    return sch.mod["main"].with_attr("tir.is_scheduled", True)


def _time_defaults(seg, mod, spec, workloads, timeout_s: float) -> None:
    """Build with default schedules and time every kernel call on this machine. The build
    runs in a forked child with a time limit, as the compile's own builds do (TVM's
    compiler can hang); a segment whose build fails or times out stays unmeasured."""
    if spec.remote is not None:
        with tempfile.TemporaryDirectory(prefix="wb-defaults-") as tmp:
            built = _build_forked(seg, spec, Path(tmp), None, timeout_s)
            if built is not None:
                library = Path(tmp) / built.kernels_library
                _time_defaults_on_device(seg, mod, spec, workloads, library)
        return
    loaded = _load_build(seg, mod, spec, None, timeout_s)
    if loaded is None:
        return
    by_name = _per_call(kernel_times_us(*loaded, runs=3))
    for gv, func in mod.functions.items():
        if not _is_prim_func(func):
            continue
        w = workloads.get(workload_key(workload_module(func)))
        if w is None:  # hand-written: not tuned
            continue
        w.timed = True
        if gv.name_hint in by_name:
            per_call, count = by_name[gv.name_hint]
            w.calls += count
            w.default_us = per_call if w.default_us is None else min(w.default_us, per_call)


def _build_forked(seg, spec, directory: Path, tuned, timeout_s: float):
    """Build ``seg`` (``tuned`` kernels, the rest on default schedules) into ``directory``
    in a forked child with a time limit; None if it failed or timed out."""
    from engine.fusion import forked

    # the weights are passed from memory by the caller: no .npz (half a GB on VGG)
    build = functools.partial(build_segment, write_params=False)
    args = (seg, spec, directory, "tuned" if tuned else "defaults", tuned)
    try:
        if spec.kind == "cuda":  # a CUDA context does not survive a fork
            return build(*args)
        return forked.call_forked(build, args, timeout_s=timeout_s)
    except (forked.ChildTimeout, forked.ChildFailed):
        return None


def _load_build(seg, mod, spec, tuned, timeout_s: float):
    """``seg`` built (see :func:`_build_forked`) and loaded here, with random inputs:
    ``(vm, run, kernel names)`` for :func:`kernel_times_us`; None if it did not build."""
    import tvm
    from tvm.runtime.vm import VirtualMachine

    with tempfile.TemporaryDirectory(prefix="wb-kernels-") as tmp:
        built = _build_forked(seg, spec, Path(tmp), tuned, timeout_s)
        if built is None:
            return None
        # A fresh temporary path each time: the loader never confuses two builds.
        vm = VirtualMachine(tvm.runtime.load_module(str(Path(tmp) / built.library)), spec.device())
    main = mod["main"]
    num_input = int(main.attrs["num_input"])
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(_random(p, rng), spec.device()) for p in main.params[:num_input]]
    args += [tvm.runtime.tensor(v, spec.device()) for v in seg.imported.params.values()]
    return vm, lambda: vm["main"](*args), built.kernel_names


def _per_call(times: dict) -> dict[str, tuple[float, int]]:
    """``{(kernel, occurrence): us}`` as ``{kernel: (mean us per call, calls)}``."""
    sums: dict[str, tuple[float, int]] = {}
    for (name, _), us in times.items():
        total, count = sums.get(name, (0.0, 0))
        sums[name] = (total + us, count + 1)
    return {name: (total / count, count) for name, (total, count) in sums.items()}


_IN_MODEL_ROUNDS = 3


def _check_in_model(modules, spec, workloads, store, tkey: str, progress, timeout_s: float) -> dict:
    """Tuned schedules measured faster alone can run slower in the model: MetaSchedule
    times a kernel on its own, over and over on the same inputs (ResNet-50's blocked convs
    on a Zen 5, 20 minutes of tuning: conv2d16 445 us alone against 564 by default, 550
    in the model against 520; the model 25.6 ms tuned, 23.6 by default). Every segment
    with a tuned kernel not checked yet is built both ways and its kernels timed in the
    model, the two builds in alternating rounds; a tuned schedule stays only where it is
    faster there too. The verdict goes to the store with the record it is about: a second
    compile builds nothing for it. Local CPU builds only (the VM's instrument does not
    cross RPC)."""
    unchecked = {w.key for w in workloads.values() if w.chosen is not None and w.in_model is None}
    summary = {"checked": 0, "dropped": 0}
    if not unchecked or spec.remote is not None or spec.kind != "llvm":
        return summary
    progress(0.99, f"timing {len(unchecked)} tuned kernels in the model against their defaults")
    chosen = _chosen(workloads)
    for seg, mod in modules:
        keys = {
            gv.name_hint: workload_key(workload_module(func))
            for gv, func in mod.functions.items()
            if _is_prim_func(func)
        }
        if not unchecked & set(keys.values()):
            continue
        default = _load_build(seg, mod, spec, None, timeout_s)
        tuned = _load_build(seg, mod, spec, chosen, timeout_s)
        if default is None or tuned is None:
            continue  # the whole-model check still decides
        rounds: list[list[dict]] = [[], []]
        for _ in range(_IN_MODEL_ROUNDS):
            for k, loaded in enumerate((default, tuned)):
                rounds[k].append(_per_call(kernel_times_us(*loaded, runs=3)))
        for name, key in keys.items():
            w = workloads.get(key)
            if w is None or key not in unchecked:
                continue
            times = [[r[name][0] for r in rounds[k] if name in r] for k in range(2)]
            if not all(times):
                continue
            unchecked.discard(key)  # one kernel per workload: its first in the segment
            default_us, tuned_us = (float(np.median(t)) for t in times)
            w.in_model = {
                "record": _digest(w.record) if w.record else None,
                "default_us": round(default_us, 2),
                "tuned_us": round(tuned_us, 2),
            }
            summary["checked"] += 1
            if not _beats(tuned_us, default_us):
                w.chosen = None
                summary["dropped"] += 1
            try:
                store.put(tkey, w.key, _entry(w, spec))
            except Exception as e:  # noqa: BLE001 - the verdict stands for this compile
                summary["store_error"] = str(e)[:200]
    return summary


def _hand_written(func) -> bool:
    """A kernel whose TIR is written scheduled (``winograd``): nothing for MetaSchedule."""
    from engine.fusion.winograd import HAND_WRITTEN

    return func.attrs is not None and HAND_WRITTEN in func.attrs


def _is_prim_func(func) -> bool:
    import tvm

    return isinstance(func, tvm.tirx.PrimFunc)


def _time_defaults_on_device(seg, mod, spec, workloads, library: Path) -> None:
    """The default schedules' kernels, each timed alone on the remote device (the VM's
    instrument hook does not cross RPC); a kernel counts once per call site."""
    from engine.fusion.device_measure import time_kernel_library
    from engine.remote.device import open_device

    with open_device(spec.remote) as opened:
        times = time_kernel_library(opened, library, repeats=3)
    calls: dict[str, int] = {}
    for call in [*seg.calls, *seg.views]:
        calls[call.func] = calls.get(call.func, 0) + 1
    for w in workloads.values():
        for gv, func in mod.functions.items():
            us = times.get(gv.name_hint)
            if us is not None and workload_key(workload_module(func)) == w.key:
                w.calls += calls.get(gv.name_hint, 1)
                w.default_us = us if w.default_us is None else min(w.default_us, us)


def _random(param, rng) -> np.ndarray:
    shape = [int(d) for d in param.ty.shape.values]
    dtype = str(param.ty.dtype)
    if dtype.startswith("float"):
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0, 2, shape).astype(dtype)


def _select(pending, max_tasks: int) -> list[_Workload]:
    """The heaviest kernels to tune, up to 95% of the default-schedule time and as many
    as the budget can give enough trials each (MetaSchedule first samples every task)."""
    pending = [w for w in pending if w.default_us and w.calls]
    pending.sort(key=lambda w: -(w.default_us * w.calls))
    total = sum(w.default_us * w.calls for w in pending)
    chosen, acc = [], 0.0
    for w in pending:
        if chosen and (acc >= _TIME_SHARE_TUNED * total or len(chosen) >= max_tasks):
            break
        chosen.append(w)
        acc += w.default_us * w.calls
    return chosen


def _run(
    todo, workloads, spec, target, budget: TuningBudget, progress, devices: dict, builder=None
) -> int:
    """Tune ``todo``; returns the trials measured. ``devices`` receives the measurements
    per remote device (a remote target's)."""
    from tvm.s_tir import meta_schedule as ms

    if not todo:
        return 0
    _import_tensor_intrinsics()  # before TuneContext imports them the slow way
    # With only minutes, the deadline ends tuning, or the per-task cap on small models: a
    # global cap of one trial a second ended 20-minute budgets after 7 to 17 minutes at
    # 2 threads.
    trials = budget.trials or _MAX_TRIALS_PER_TASK * len(todo)
    per_task = trials if budget.trials else _MAX_TRIALS_PER_TASK
    total_us = sum(w.default_us * w.calls for w in todo)
    contexts = [
        ms.TuneContext(
            mod=w.mod,
            target=target,
            space_generator="post-order-apply",
            search_strategy=ms.search_strategy.EvolutionarySearch(**_SEARCH),
            task_name=w.name,
            num_threads=spec.threads,
        )
        for w in todo
    ]
    monitor = _monitor(todo, workloads, budget, progress)
    database = ms.database.MemoryDatabase()
    for w in todo:
        if w.record is not None:  # tuned before under a smaller budget: search from there
            database.commit_tuning_record(_parse_record(w.record, w.mod, database))
    if builder is None:
        builder = local_builder(spec.threads)
    evaluator = ms.runner.EvaluatorConfig(number=3, repeat=1, min_repeat_ms=20)
    with tempfile.TemporaryDirectory(prefix="wb-tune-") as work_dir:
        if spec.remote is not None:  # measured on every device under the key
            from engine.remote.tuning import rpc_runner

            device_log = Path(work_dir) / "devices.log"
            runner = rpc_runner(spec.remote, device_log, evaluator)
        else:
            runner = ms.runner.LocalRunner(evaluator_config=evaluator)
        try:
            ms.tune_tasks(
                tasks=contexts,
                task_weights=[w.default_us * w.calls / total_us for w in todo],
                work_dir=work_dir,
                max_trials_global=trials,
                max_trials_per_task=per_task,
                num_trials_per_iter=_TRIALS_PER_ITER,
                builder=builder,
                runner=runner,
                database=database,
                measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), monitor],
            )
        except Exception:  # noqa: BLE001 - our own stop signals come back wrapped
            if monitor.cancelled is not None:
                raise monitor.cancelled from None
            if not monitor.out_of_time:
                raise
        if spec.remote is not None:
            from engine.remote.tuning import devices_used

            devices.update(devices_used(device_log))
    for k, w in enumerate(todo):
        w.trials = monitor.trials_by_task.get(k, 0)
        record = _best(database, w.mod, target)
        if record is None:
            continue
        w.tuned_us = float(np.mean([float(s) for s in record.run_secs])) * 1e6
        w.record = _json(record.as_json())
        w.chosen = _apply_trace(w.mod, record.trace) if _beats(w.tuned_us, w.default_us) else None
    return monitor.trials


def _best(database, mod, target):
    try:
        return database.query_tuning_record(mod, target, "main")
    except Exception:  # noqa: BLE001 - no valid record for this workload
        return None


def local_builder(threads: int):
    """MetaSchedule's LocalBuilder with our build function, on this machine's processes."""
    from tvm.s_tir import meta_schedule as ms

    return ms.builder.LocalBuilder(
        max_workers=min(2, threads), timeout_sec=_BUILD_TIMEOUT_S, f_build=build_candidate
    )


def build_candidate(mod, target, _params=None):
    """MetaSchedule's ``default_build`` without its ``import tvm.s_tir.tensor_intrin``:
    the builder starts fresh processes for every batch of candidates, and that import
    costs each of them 20 s (a built candidate no longer refers to the intrinsics)."""
    from tvm.driver import build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


def _import_tensor_intrinsics() -> None:
    """Import ``tvm.s_tir.tensor_intrin`` (MetaSchedule needs its registrations) in ~3 s
    instead of ~20 s.

    Each of its ~500 TVMScript functions calls ``inspect.stack()``; for every frame of
    the frozen import machinery, ``inspect.getmodule`` scans all of ``sys.modules`` in
    vain. During this one import, the answer is looked up once per file name.
    """
    import sys

    if "tvm.s_tir.tensor_intrin" in sys.modules:
        return
    original = inspect.getmodule
    found: dict[str, object] = {}

    def getmodule(obj, _filename=None):
        if _filename is None:
            return original(obj)
        if _filename not in found:
            found[_filename] = original(obj, _filename)
        return found[_filename]

    inspect.getmodule = getmodule
    try:
        import tvm.s_tir.tensor_intrin  # noqa: F401 - registers the intrinsics
    finally:
        inspect.getmodule = original


def _beats(tuned_us, default_us) -> bool:
    return tuned_us is not None and (default_us is None or tuned_us < _MIN_GAIN * default_us)


def _entry(w: _Workload, spec) -> dict:
    import tvm

    return {
        "kernel": w.name,
        "workload": _json(w.mod),
        "records": [w.record] if w.record is not None else [],
        "default_us": w.default_us,
        "tuned_us": w.tuned_us,
        "budget_trials": w.budget_trials,
        "target": dict(spec.target),
        "tvm": tvm.__version__,
        **({"in_model": w.in_model} if w.in_model else {}),
    }


_TENSORIZE = '"Tensorize"'  # the instruction's kind as a tuning record's JSON names it


def _digest(record: str) -> str:
    return hashlib.sha256(record.encode()).hexdigest()[:16]


def _json(value) -> str:
    import tvm

    return tvm.ir.save_json(value)


def _estimate(workloads, tuned: bool) -> float:
    total = 0.0
    for w in workloads.values():
        if w.default_us is None:
            continue
        us = w.tuned_us if tuned and w.chosen is not None and w.tuned_us else w.default_us
        total += us * w.calls
    return round(total / 1e3, 3)


def _monitor(todo, workloads, budget: TuningBudget, progress: ProgressFn):
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    @derived_object
    class Monitor(ms.measure_callback.PyMeasureCallback):
        def __init__(self):
            self.trials = 0
            self.trials_by_task: dict[int, int] = {}
            self.best_us: dict[int, float] = {}
            self.cancelled: Cancelled | None = None
            self.out_of_time = False
            self.started = time.perf_counter()

        def apply(self, task_scheduler, task_id, candidates, builds, runs) -> None:
            self.trials += len(runs)
            self.trials_by_task[task_id] = self.trials_by_task.get(task_id, 0) + len(runs)
            for result in runs:
                if result.run_secs:
                    us = float(np.mean([float(s) for s in result.run_secs])) * 1e6
                    self.best_us[task_id] = min(self.best_us.get(task_id, math.inf), us)
            estimate = 0.0
            for k, w in enumerate(todo):
                estimate += min(w.default_us, self.best_us.get(k, math.inf)) * w.calls
            rest = sum(
                w.default_us * w.calls for w in workloads.values() if w not in todo and w.default_us
            )
            elapsed = time.perf_counter() - self.started
            if budget.trials:
                done, spent = self.trials / budget.trials, f"{self.trials}/{budget.trials} trials"
            else:
                done, spent = 0.0, f"{self.trials} trials"
            if budget.minutes:
                done = max(done, elapsed / (budget.minutes * 60))
                spent += f", {elapsed / 60:.1f} of {budget.minutes:g} min"
            message = (
                f"tuning: {spent}, {len(self.best_us)}/{len(todo)} tasks measured, "
                f"estimated latency {(estimate + rest) / 1e3:.2f} ms"
            )
            try:
                progress(min(done, 0.99), message)
            except Cancelled as e:
                self.cancelled = e
                raise
            if budget.minutes and elapsed > budget.minutes * 60:
                self.out_of_time = True
                raise TimeoutError("tuning time budget spent")

    return Monitor()
