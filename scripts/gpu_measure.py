"""Measure every figure the notebooks cite, on this machine's first CUDA GPU; a quick dry run without one.

    python scripts/gpu_measure.py OUTDIR [--dry-run] [--budget 170] [--only STEP,STEP]

Writes OUTDIR/reference/ (copy it unchanged into gpulab/reference/ to record a GPU's figures):

- SLUG-measure.json: the environment (torch/CUDA/NCCL/driver versions, SMs, clocks, PCIe link, MIG
  mode, matmul precision) and one table of rows per step (the Boston loop, DataParallel, DDP,
  autocast training steps with peak memory, saved-for-backward memory, matmul modes, one NCCL rank's
  all_reduce per call, notebook 14's Triton kernels against torch), read by
  ``gpulab.gpu_reference.recorded(STEP)``;
- SLUG-matmul-*.json, SLUG-copy-*.json: bench files in exactly the format ``gpulab.gpu_reference`` loads.

SLUG names the device (``nvidia-h200``; ``cpu`` for a dry run). Every step has its own try/except
and the measurement file is rewritten (atomically) before and after each step, so a failure or a
timeout keeps everything measured so far. A step still marked "running" is where a run was killed.
Re-running with --only updates those steps in the existing file. Exit status 1 if any step failed.
Needs no Jupyter and no network; about 2 minutes on one H200, well under a minute as a CPU dry run.
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the script runs from a checkout: gpulab comes from it
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from gpulab import (argtypes, bench, bench_results, cpu_info, gpu_reference, memory, models, nvidia_smi,  # noqa: E402
                    pinning, precision, timing)
from gpulab.atomic import write_json  # noqa: E402
from gpulab.bench_results import now, read_json  # noqa: E402

SMI_FIELDS = ("name", "driver_version", "vbios_version", "pci.bus_id", "pcie.link.gen.current", "pcie.link.gen.max",
              "pcie.link.width.current", "pcie.link.width.max", "clocks.sm", "clocks.max.sm", "clocks.mem",
              "clocks.max.mem", "power.limit", "power.draw", "mig.mode.current", "memory.total", "temperature.gpu",
              "persistence_mode", "compute_mode", "ecc.mode.current")
PROPS = ("name", "major", "minor", "total_memory", "multi_processor_count", "L2_cache_size",
         "max_threads_per_multi_processor", "regs_per_multiprocessor", "warp_size", "uuid", "pci_bus_id")


class Skip(Exception):
    """A step that does not apply here (said in the file, not a failure)."""


# ----------------------------------------------------------------------------- environment


def environment() -> dict:
    """Versions, the device's properties and settings, and what nvidia-smi says."""
    env = {**bench_results.environment(), "date": now(), "cpu": cpu_info.cpu_description(), "cpu_count": os.cpu_count(),
           "threads": torch.get_num_threads(), "cuda_runtime": torch.version.cuda, "torch_git": torch.version.git_version,
           "allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32, "allow_tf32_cudnn": torch.backends.cudnn.allow_tf32,
           "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"), "machine": platform.machine()}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env.update({f"gpu.{k}": str(getattr(props, k)) for k in PROPS if hasattr(props, k)})
        env["gpu_count"] = torch.cuda.device_count()
        env["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if hasattr(torch.cuda, "nccl") else None
        env.update({f"smi.{k}": v for k, v in nvidia_smi.query(SMI_FIELDS).items()})
    return env


# ----------------------------------------------------------------------------- the file and its steps


class Recorder:
    """The measurement file: rewritten atomically around every step, so nothing measured is lost."""

    def __init__(self, outdir: Path, dry_run: bool, budget: float):
        cuda = torch.cuda.is_available()
        self.device = torch.device("cuda", 0) if cuda else torch.device("cpu")
        self.description = torch.cuda.get_device_name(0) if cuda else "cpu"
        self.slug = gpu_reference.device_slug(self.description) if cuda else "cpu"
        self.folder = outdir / "reference"
        self.path = self.folder / gpu_reference.measure_file_name(self.slug)
        self.budget, self.start, self.failed = budget, time.monotonic(), False
        self.cfg = DRY if dry_run else GPU
        old = read_json(self.path) if self.path.exists() else {}
        self.data = {"format": gpu_reference.MEASURE_FORMAT, "created": now(), "device": str(self.device),
                     "description": self.description, "slug": self.slug, "dry_run": dry_run, "environment": {},
                     "steps": {}}
        if isinstance(old, dict) and old.get("format") == gpu_reference.MEASURE_FORMAT and old.get("dry_run") == dry_run:
            self.data.update(created=old.get("created"), steps=old.get("steps", {}))
        try:  # recorded with every run, whatever steps it makes
            self.data["environment"] = environment()
        except Exception as exc:  # never worth losing the measurements for
            self.data["environment"] = {**bench_results.environment(), "error": f"{type(exc).__name__}: {exc}"}

    def write(self) -> None:
        self.data["updated"] = now()
        write_json(self.path, self.data)

    def save(self, what: str, results) -> str:
        """Write a bench file ``SLUG-what.json`` and return its name."""
        return bench_results.save_results(self.folder / gpu_reference.bench_file_name(self.slug, what), results).name

    def run(self, name: str, step) -> None:
        elapsed = time.monotonic() - self.start
        if elapsed > self.budget:
            self.data["steps"][name] = {"status": "skipped", "reason": f"time budget of {self.budget:g} s used up"}
        else:
            self.data["steps"][name] = {"status": "running", "started": now()}
            self.write()
            t0 = time.monotonic()
            try:
                entry = {"status": "ok", **step(self)}
            except Skip as why:
                entry = {"status": "skipped", "reason": str(why)}
            except Exception as exc:  # one failure must not lose the other steps
                traceback.print_exc()
                first = (str(exc).strip().splitlines() or [""])[0]
                entry = {"status": "error", "error": f"{type(exc).__name__}: {first}"}
                self.failed = True
            entry["seconds"] = round(time.monotonic() - t0, 2)
            self.data["steps"][name] = entry
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
        entry = self.data["steps"][name]
        self.write()
        detail = entry.get("reason") or entry.get("error") or ", ".join(entry.get("files", [])) or entry.get("note", "")
        print(f"{entry['status'].upper():<7} {name:<16} {entry.get('seconds', 0):7.1f} s  {detail}", flush=True)


def sweep(call, sizes) -> tuple[list, str]:
    """``call(size)`` for each size; the results that worked and a note on those that did not."""
    results, errors = [], []
    for size in sizes:
        try:
            results.append(call(size))
        except ValueError as exc:
            errors.append(f"size {size}: {exc}")
    if not results:
        raise RuntimeError("; ".join(errors) or "no sizes")
    return results, "; ".join(errors)


def rate_rows(results) -> list[dict]:
    return [{"size": r.size, "unit": "n" if r.probe == "matmul" else "MiB", "pinned": r.pinned,
             "non_blocking": r.non_blocking, "ms": r.seconds * 1e3, "rate": r.rate, "rate_unit": r.unit}
            for r in results]


# ----------------------------------------------------------------------------- the steps


GPU = {"matmul": [1024, 2048, 4096, 8192, 16384], "launch": [8, 32, 128], "copy": [1, 4, 16, 64, 256, 1024],
       "device": [64, 256, 1024], "loader_mb": 256, "modes_n": 8192, "epochs": 20, "repeats": 3,
       "mlp": (1024, 4096, 8192), "min_run_time": 0.1}
DRY = {"matmul": [64, 128], "launch": [8], "copy": [1, 4], "device": [4], "loader_mb": 8, "modes_n": 64, "epochs": 3,
       "repeats": 1, "mlp": (32, 64, 256), "min_run_time": 0.02}


def matmul_step(dtype: str, matmul_precision: str | None, what: str, sizes_key: str = "matmul"):
    def step(rec: Recorder) -> dict:
        if dtype == "bfloat16" and rec.device.type == "cuda" and not precision.bf16_supported(rec.device):
            raise Skip("compute capability < 8.0: bfloat16 is only emulated")
        results, note = sweep(lambda n: bench.matmul_probe(rec.device, n, dtype, min_run_time=rec.cfg["min_run_time"],
                                                           matmul_precision=matmul_precision), rec.cfg[sizes_key])
        if matmul_precision == "high" and rec.device.type == "cuda":  # a T4 (7.5) runs "TF32" as plain float32
            note = "; ".join(n for n in (note, precision.hardware_note(rec.device, "tf32")) if n)
        return {"files": [rec.save(what, results)], "rows": rate_rows(results), "note": note}
    return step


def copy_step(kind: str):
    def step(rec: Recorder) -> dict:
        if kind in ("h2d", "d2h") and rec.device.type != "cuda":
            raise Skip(f"a {kind} copy needs a CUDA device")
        sizes = rec.cfg["copy" if kind in ("h2d", "d2h") else "device"]
        ways = [(p, nb) for p in (False, True) for nb in (False, True)] if kind in ("h2d", "d2h") else [(False, False)]
        results, notes = [], []
        for pinned, nb in ways:
            rs, note = sweep(lambda mb: bench.copy_probe(rec.device, mb, kind, pinned=pinned, non_blocking=nb,
                                                         min_run_time=rec.cfg["min_run_time"]), sizes)
            results += rs
            notes += [note] if note else []
        return {"files": [rec.save(f"copy-{kind}", results)], "rows": rate_rows(results), "note": "; ".join(notes)}
    return step


def loader_step(rec: Recorder) -> dict:
    # Pinned in the main thread (num_workers=0) and by the pin thread beside 2 worker processes.
    ways = ([(p, nb, 0) for p in (False, True) for nb in (False, True)] + [(False, False, 2), (True, True, 2)]
            if rec.device.type == "cuda" else [(False, False, 0)])
    results = [pinning.loader_probe(rec.device, rec.cfg["loader_mb"], pin_memory=p, non_blocking=nb, num_workers=w,
                                    min_run_time=2 * rec.cfg["min_run_time"]) for p, nb, w in ways]
    note = "" if rec.device.type == "cuda" else "cpu: no copy to make, this times the loader alone"
    return {"files": [rec.save("copy-loader", results)], "rows": rate_rows(results), "note": note}


def modes_step(rec: Recorder) -> dict:
    return {"rows": precision.matmul_modes(rec.device, rec.cfg["modes_n"], min_run_time=rec.cfg["min_run_time"])}


def boston_loop_step(rec: Recorder) -> dict:
    from gpulab.article import compare_loops

    places = [str(rec.device), "cpu"] if rec.device.type == "cuda" else ["cpu"]
    rows = []
    for place in places:
        r = compare_loops(place, rec.cfg["epochs"], rec.cfg["repeats"])
        for loop, seconds in r["seconds"].items():
            low, high = r["spread"][loop]
            rows.append({"device": r["device"], "loop": loop, "epochs_per_s": r["epochs"] / seconds,
                         "slowest_epochs_per_s": r["epochs"] / high, "fastest_epochs_per_s": r["epochs"] / low})
    return {"rows": rows, "note": "article: gpulab.article.train_article as the article wrote it; + loss.item(): "
                                  "with a per-batch loss.item(); gpulab fit: gpulab.train.fit, data on the device"}


def _fit_rows(rec: Recorder, label: str, model: nn.Module, X, y, batch_size: int, **fit_args) -> dict:
    """Median ms per optimizer step of ``fit`` (first epoch left out) and the CUDA peak during it."""
    from gpulab.train import fit

    with memory.peak_memory(rec.device) as peak:
        h = fit(model, (X, y), epochs=rec.cfg["epochs"] + 1, batch_size=batch_size, device=rec.device,
                progress=False, **fit_args)
    steps = -(-len(X) // batch_size)
    return {"variant": label, "ms_per_step": 1e3 * statistics.median(h.seconds[1:]) / steps,
            "peak_MiB": None if peak.bytes is None else peak.bytes / 2**20, "final_loss": h.loss[-1]}


def data_parallel_step(rec: Recorder) -> dict:
    from gpulab.experiment import Recipe, article_model, boston_data

    recipe = Recipe()
    data = boston_data(recipe, rec.device)
    rows = []
    for label, wrap in (("Net1", lambda m: m), ("nn.DataParallel(Net1)", nn.DataParallel)):
        model = wrap(article_model(recipe, device=rec.device))
        row = _fit_rows(rec, label, model, data.X_train, data.y_train, recipe.batch_size)
        row["device_ids"] = str(getattr(model, "device_ids", "-"))
        rows.append(row)
    return {"rows": rows, "note": f"{torch.cuda.device_count()} CUDA device(s); Boston train set, batch 128"}


def ddp_step(rec: Recorder) -> dict:
    from gpulab.distributed.ddp.driver import step_time
    from gpulab.experiment import Recipe

    recipe, rows = Recipe(epochs=rec.cfg["epochs"] + 5), []
    before = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = before or str(min(8, os.cpu_count() or 1))  # torchrun would set 1, on stderr
    try:
        for backend in ("nccl", "gloo"):
            if backend == "nccl" and rec.device.type != "cuda":
                rows.append({"ranks": 1, "backend": "nccl", "note": "skipped: nccl needs a CUDA device"})
                continue
            rows.append({**step_time(1, recipe, warmup=5, backend=backend, timeout=120),
                         "threads": os.environ["OMP_NUM_THREADS"], "note": ""})
    finally:
        if before is None:
            del os.environ["OMP_NUM_THREADS"]
    return {"rows": rows, "note": "one rank through torchrun (gpulab.distributed.ddp.driver.train_ddp); gloo trains on the CPU"}


def nccl_all_reduce_step(rec: Recorder) -> dict:
    """One NCCL rank through torchrun (notebook 09's rank program): all_reduce and broadcast per call."""
    if rec.device.type != "cuda":
        raise Skip("nccl needs a CUDA device")
    from gpulab.distributed.collectives.driver import run_collectives

    sizes = [2**k for k in range(10, 27, 4)] if not rec.data["dry_run"] else [1024]
    result = run_collectives(1, parts=("sweep",), collectives=("all_reduce", "broadcast"), sizes=sizes,
                             repeats=rec.cfg["repeats"] * 3, backend="nccl", timeout=120)
    rows = [{"collective": r["collective"], "bytes": r["bytes"], "us": r["seconds"] * 1e6,
             "algbw_GB/s": r["algbw"] / 1e9} for r in result.sweep]
    return {"rows": rows, "note": "1 rank: no link is used (busbw is 0 by definition); the time per call is "
                                  "NCCL's floor: launch, synchronize and a copy on the GPU"}


def _mlp(rec: Recorder):
    d_in, hidden, batch = rec.cfg["mlp"]
    torch.manual_seed(0)
    model = models.mlp([d_in, hidden, hidden, 1])
    return model.to(rec.device), torch.randn(batch, d_in, device=rec.device), torch.randn(batch, 1, device=rec.device)


def autocast_step(rec: Recorder) -> dict:
    model, X, y = _mlp(rec)
    rows = []
    for label, dtype, mp in (("float32", None, "highest"), ("float32 + TF32", None, "high"),
                             ("autocast bfloat16", torch.bfloat16, None), ("autocast float16 + GradScaler", torch.float16, None)):
        with timing.float32_matmul_precision(mp):
            rows.append(_fit_rows(rec, label, copy.deepcopy(model), X, y, len(X), autocast_dtype=dtype))
    return {"rows": rows, "note": f"MLP {tuple(model[0].weight.shape[::-1])}+{model[2].weight.shape[0]}, "
                                  f"batch {len(X)}, Adam, one step per epoch of gpulab.train.fit"}


def memory_step(rec: Recorder) -> dict:
    model, X, y = _mlp(rec)
    variants = ("float32", "autocast bfloat16", "autocast float16", "bfloat16 weights")
    return {"rows": [{k: (v / 2**20 if isinstance(v, int) and k != "variant" else v) for k, v in r.to_dict().items()}
                     for r in memory.memory_table(model, X, y, variants)],
            "note": f"MiB; MLP batch {len(X)}; gpulab.memory.training_memory (saved_tensors_hooks + exact sizes)"}


def triton_step(rec: Recorder) -> dict:
    """Notebook 14's Triton kernels, compiled, against torch (gpulab.kernels.measure), and a kernel inductor writes."""
    if rec.device.type != "cuda":
        raise Skip("compiled Triton kernels need a CUDA device (notebook 14 runs them in Triton's interpreter on a CPU)")
    from gpulab.kernels import runtime

    backend = runtime.prepare(rec.device)
    if not backend.ok:
        raise Skip(backend.reason)
    from gpulab.kernels import measure, traffic

    x = torch.randn(4096, 1000, device=rec.device)
    name, source = measure.inductor_kernel(traffic.softmax_separate, x)
    return {"rows": measure.gpu_rows(rec.device, small=rec.data["dry_run"]), "source": source,
            "note": f"triton {backend.triton}; inductor wrote {name} for the separate-operations softmax"}


def environment_after_step(rec: Recorder) -> dict:
    """nvidia-smi again after the load: clocks, power and the PCIe link generation under work."""
    if rec.device.type != "cuda":
        raise Skip("no CUDA device")
    return {"rows": [{"item": k, "value": v} for k, v in nvidia_smi.query(SMI_FIELDS).items()]}


def environment_step(rec: Recorder) -> dict:
    return {"rows": [{"item": k, "value": v} for k, v in rec.data["environment"].items()]}


STEPS = {
    "environment": environment_step,
    "matmul-float32": matmul_step("float32", "highest", "matmul-float32"),
    "matmul-tf32": matmul_step("float32", "high", "matmul-tf32"),
    "matmul-bfloat16": matmul_step("bfloat16", None, "matmul-bfloat16"),
    "matmul-float16": matmul_step("float16", None, "matmul-float16"),
    "launch_floor": matmul_step("float32", "highest", "matmul-launch", "launch"),
    "copy-h2d": copy_step("h2d"),
    "copy-d2h": copy_step("d2h"),
    "copy-device": copy_step("device"),
    "add": copy_step("add"),
    "loader": loader_step,
    "boston_loop": boston_loop_step,
    "autocast_step": autocast_step,
    "memory": memory_step,
    "matmul_modes": modes_step,
    "data_parallel": data_parallel_step,
    "ddp": ddp_step,
    "nccl_all_reduce": nccl_all_reduce_step,
    "triton": triton_step,
    "environment_after": environment_after_step,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--dry-run", action="store_true", help="small sizes (always so without CUDA)")
    parser.add_argument("--budget", type=argtypes.non_negative_float, default=170.0,
                        help="start no step after this many seconds")
    parser.add_argument("--only", type=lambda t: [s.strip() for s in t.split(",") if s.strip()], default=None,
                        help=f"comma-separated steps to run: {', '.join(STEPS)}")
    args = parser.parse_args(argv)
    bad = [s for s in args.only or [] if s not in STEPS]
    if bad:
        parser.error(f"unknown step(s) {', '.join(bad)}: use {', '.join(STEPS)}")
    rec = Recorder(args.outdir, args.dry_run or not torch.cuda.is_available(), args.budget)
    print(f"measuring on {rec.description} ({rec.device}){' [dry run]' if rec.data['dry_run'] else ''}, "
          f"torch {torch.__version__}; writing reference/{rec.path.name}", flush=True)
    for name in args.only or STEPS:
        rec.run(name, STEPS[name])
    print(f"done in {time.monotonic() - rec.start:.0f} s; {len(os.listdir(rec.folder))} file(s) in reference/")
    return 1 if rec.failed else 0


if __name__ == "__main__":
    sys.exit(main())
