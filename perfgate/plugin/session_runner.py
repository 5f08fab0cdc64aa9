"""Where and how a session's cell runs: beside its base (--perf-against, paired), in the session's warm
isolated child (perfgate.measure.isolate), or in this process (run_cell); its run options, its job for another
process, its time limit and its device's environment. A part of PerfSession (perfgate.plugin.session), whose
state it reads. torch is imported only when a cell runs, or a GPU cell's child starts early (its GPU's order).
"""

from __future__ import annotations

from perfgate.core import matrix
from perfgate.core.matrix import Cell


class CellRunner:
    """PerfSession's cell placement and launch; reads the session's config, pairing, tf32, results file and
    warm cell process (PerfSession.__init__)."""

    def _run_here(self, spec, cell: Cell, options, record_compiled, remeasure: str = "") -> dict:
        from perfgate.measure import record_builder
        from perfgate.measure.cell import run_cell
        from perfgate.measure.devices import start_cell

        def checkpoint(partial: dict) -> None:  # superseded by the final record (a later one wins)
            self.append(record_builder.in_run(partial, self.run_id, remeasure))

        device = start_cell(options.device, self.tf32)
        return run_cell(spec, cell, options, self.environment(device), self.say, record_compiled, checkpoint)

    def unfit(self, cell: Cell) -> str:
        """Why this worker's timings cannot be trusted (xdist workers sharing the machine), or ""."""
        if self.workers <= 1:
            return ""
        if cell.phase == "ddp":
            return (
                f"a data-parallel cell's ranks take {cell.world} GPUs, shared with the other "
                f"{self.workers - 1} xdist worker(s)' cells: run ddp cells without -n"
            )
        import torch

        from perfgate.plugin.workers import unfit_reason

        gpus = torch.cuda.device_count() if cell.device_kind == "gpu" else 0
        return unfit_reason(cell.device_kind, self.workers, gpus)

    def measures_paired(self, cell: Cell) -> bool:
        """Whether `cell` is measured beside the base (--perf-against): every cell but a data-parallel one,
        whose ranks hold the GPUs the two sides would share."""
        return self.pairing is not None and cell.phase != "ddp"

    def unpaired_elsewhere(self, cell: Cell) -> str:
        """Why `cell` cannot run here, or "": a cell the pairing leaves out (data-parallel) runs in this session,
        on this tree and interpreter, which are not side B's where --perf-b-* name another: its record would
        be B's with A's code in it."""
        if self.pairing is None or self.measures_paired(cell) or not self.pairing.b_elsewhere:
            return ""
        return (
            f"{cell.id}: a data-parallel cell is not paired, and side B is not this session's tree, interpreter "
            "or environment (--perf-b-*): measure it with perfgate ab --processes N"
        )

    def isolates(self, cell: Cell) -> bool:
        """Whether `cell` runs in this session's isolated child: never a paired cell, which runs in its two
        sides' workers, each a process of its own with its own time limits (perfgate.ab.pair_workers)."""
        if self.measures_paired(cell):
            return False
        choice = self.config.getoption("--perf-isolate")
        return choice == "all" or (choice == "gpu" and cell.device_kind == "gpu")

    def time_limit_s(self, spec, cell: Cell) -> float:
        """--perf-cell-timeout, else the model's own limit, else the variant's default."""
        return (
            self.config.getoption("--perf-cell-timeout")
            or spec.time_limit_s
            or matrix.VARIANTS[cell.variant].time_limit_s
        )

    def job(self, spec, cell: Cell, options, remeasure: str = ""):
        """The cell as one serializable job, for a process other than this one."""
        from perfgate.core.job import Job
        from perfgate.measure.launch import import_path

        return Job(
            cell=cell,
            options=options,
            tf32=self.tf32,
            results_path=str(self.results_path),
            run_id=self.run_id,
            limit_s=self.time_limit_s(spec, cell),
            sys_path=tuple(import_path()),
            remeasure=remeasure,
        )

    def _run_isolated(self, spec, cell: Cell, options, record_compiled, remeasure: str = "") -> dict:
        job = self.job(spec, cell, options, remeasure)
        return self.isolated_process().run(job, self.say, record_compiled)

    def isolated_process(self, gpu: bool = True):
        """The warm process of this session's isolated cells, made on first use. `gpu`: a GPU cell may run
        there, so its child lists this worker's GPU first (perfgate.measure.launch.first_gpu), which asks torch
        for the GPUs; a session of CPU cells alone does not import it."""
        if self.cell_process is None:
            from perfgate.measure.isolate import CellProcess

            device, gpus = "", 0
            if gpu:
                from perfgate.measure.devices import worker_gpu

                device, gpus = worker_gpu(self.worker)
            self.cell_process = CellProcess(None, device, gpus)
        return self.cell_process

    def close(self) -> None:
        """End the warm cell process, if one runs."""
        if self.cell_process is not None:
            self.cell_process.close()
            self.cell_process = None
        if self.pairing is not None:
            self.pairing.close()

    def environment(self, device) -> dict:
        """The environment of `device` (a torch.device), taken once per device and session."""
        from perfgate.measure.env import environment

        key = str(device)
        if key not in self._envs:
            self._envs[key] = environment(device, self.tf32)
        return self._envs[key]

    def options(self, cell: Cell, device: str):
        from perfgate.core.fault import parse as parse_fault
        from perfgate.core.job import RunOptions
        from perfgate.core.timing_plan import CPU_PLAN, GPU_PLAN

        opt = self.config.getoption
        overrides = {
            "min_rounds": opt("--perf-min-rounds"),
            "max_rounds": opt("--perf-max-rounds"),
            "target_round_ms": opt("--perf-round-ms"),
        }
        plan = (GPU_PLAN if cell.device_kind == "gpu" else CPU_PLAN).replace(
            **{key: value for key, value in overrides.items() if value is not None}
        )
        references = opt("--perf-reference-cache")
        return RunOptions(
            device=device,
            plan=plan,
            warm_compile=opt("--perf-warm-compile"),
            cache_dir=opt("--perf-cache-dir"),
            reference_dir=None if references == "off" else references,
            numerics=opt("--perf-numerics") == "on",
            fault=parse_fault(opt("--perf-inject")),
            profile_dir=opt("--perf-profile"),
            registry=self.registry,
        )
