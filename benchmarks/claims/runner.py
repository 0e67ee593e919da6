"""Running jobs: resumable, logged tool invocations, in run order, with failures contained."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from .catalogue import Run
from .jobs import (
    COLLECT_SECONDS_FILE,
    DEMONSTRATIONS,
    ROOT,
    TRAINED_WORLD_MODEL,
    CheckpointJob,
    Context,
    Job,
    collect_job,
    read_json,
    rel,
    write_json,
)
from .statistics import build_result, current_result

#: Held (``flock``) by the driver running a job, in the job's output directory.
LOCK_FILE = ".paper_claims.lock"


class JobFailed(RuntimeError):
    """A tool exited non-zero or without writing its result file."""


class JobBusy(JobFailed):
    """Another driver is running the same job right now (two drivers on one run directory would corrupt it)."""

    def __init__(self, job: Job) -> None:
        super().__init__(f"another process is running {job.tool} in {rel(job.output_dir)}")


@contextlib.contextmanager
def exclusive(job: Job) -> Iterator[None]:
    """Hold the job's lock while it runs, so that drivers run side by side (one per core) stay safe.

    Raises:
        JobBusy: If another process holds it. The lock goes with its process, so a killed driver leaves none.
    """
    job.output_dir.mkdir(parents=True, exist_ok=True)
    with open(job.output_dir / LOCK_FILE, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise JobBusy(job) from None
        yield


def execute(job: Job, echo: bool = True) -> None:
    """Run one job, its output appended to ``<output_dir>/<tool>.log`` (and echoed when ``echo``).

    Raises:
        JobFailed: With the log's path, if the tool fails.
        JobBusy: If another driver is running the same job.
    """
    with exclusive(job):
        if job.done():  # finished by the driver that held the lock a moment ago
            return
        _execute(job, echo)


@contextlib.contextmanager
def terminate_raises() -> Iterator[None]:
    """Make SIGTERM (``kill``, a session's end) raise ``SystemExit`` in the driver, as Ctrl-C raises
    ``KeyboardInterrupt``, so that the tool it runs is stopped with it. By default SIGTERM ends Python at once: the
    tool ran on orphaned without the job's lock, and a rerun of the same command ran the job a second time beside it,
    both writing one output directory. Outside the main thread (no handler can be set there) nothing changes."""

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    try:
        previous = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _execute(job: Job, echo: bool) -> None:
    log = job.output_dir / f"{job.tool}.log"
    argv = job.argv()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    with open(log, "ab", buffering=0) as handle, terminate_raises():  # unbuffered: the log shows the tool's progress
        handle.write(f"\n$ {shlex.join(argv)}\n".encode())
        process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            # Raw chunks, not lines: progress bars redraw with \r, which line reading would turn into floods.
            for chunk in iter(lambda: process.stdout.read1(1 << 16), b""):
                handle.write(chunk)
                if echo:
                    sys.stdout.buffer.write(chunk)
                    sys.stdout.flush()
        except BaseException:
            # Interrupted (Ctrl-C, SIGTERM): stop the tool too; its last checkpoint is where a rerun resumes.
            process.terminate()
            process.wait()
            raise
        status = process.wait()
    if status != 0 or not job.done():
        raise JobFailed(f"{job.tool} exited with status {status}; see {rel(log)}")


def prepare_demonstrations(ctx: Context, echo: bool = True) -> None:
    """Make ``ctx.train_data``: collect the expert's demonstrations, or write the shipped ones' train split.

    Raises:
        JobFailed: If the collection fails (rerunning resumes it).
    """
    if ctx.demonstrations is None:
        write_train_split(ctx)
        return
    job = collect_job(ctx)
    if not job.done():
        log = rel(job.output_dir / f"{job.tool}.log")
        print(f"paper_claims: collecting demonstrations: {job.command}\n  log: {log}", flush=True)
        resumed, started = job.result_file.is_file(), time.perf_counter()
        execute(job, echo)
        seconds = round(time.perf_counter() - started, 1)
        # A resumed collection's time covers only its last part: say so rather than pass it for the whole.
        write_json(job.output_dir / COLLECT_SECONDS_FILE, {"seconds": seconds, "resumed": resumed})


def write_train_split(ctx: Context) -> None:
    """Write the train split of the shipped demonstrations: DynaWeb never sees held-out seeds."""
    from dynaweb_env.data.jsonl import iter_jsonl_lines

    lines = [
        line for line in iter_jsonl_lines(DEMONSTRATIONS) if line.record.get("metadata", {}).get("split") == "train"
    ]  # a bad line is skipped and named
    train = "".join(f"{line.text.decode()}\n" for line in lines)
    if ctx.train_data.is_file() and ctx.train_data.read_text() == train:
        return  # unchanged: keep the file (and its timestamp) as the finished runs saw it
    ctx.train_data.parent.mkdir(parents=True, exist_ok=True)
    temporary = ctx.train_data.with_suffix(".tmp")
    temporary.write_text(train)
    os.replace(temporary, ctx.train_data)


def preflight(runs: Sequence[Run], ctx: Context) -> list[str]:
    """Problems that would make pending runs fail late (missing world model, missing browser)."""
    pending = [run for run in runs if not run.done(ctx)]
    problems = []
    if any(run.arm.world_model == "shipped" for run in pending):
        from dynaweb_env.models import ADAPTER_CONFIG_FILE, SHIPPED_ADAPTERS

        path = SHIPPED_ADAPTERS[TRAINED_WORLD_MODEL].path
        if not (path / ADAPTER_CONFIG_FILE).is_file():
            problems.append(
                f"the shipped world model {TRAINED_WORLD_MODEL} is missing ({path}): train and ship it first, "
                "or leave the DynaWeb arms out for now with --arms"
            )
    if any(run.eval or run.arm.method == "gspo-real" for run in pending):
        from dynaweb_env.envs.browser import BrowserNotFoundError, find_chromium

        try:
            find_chromium()
        except BrowserNotFoundError as error:
            problems.append(f"real-browser runs need Chromium: {error}")
    return problems


def run_all(runs: Sequence[Run], ctx: Context, echo: bool = True) -> list[str]:
    """Run every unfinished run in order (its unfinished jobs only); returns the failures.

    A failed job is reported and not retried by later runs of this invocation (they are skipped). A job another
    driver is running is not a failure: the runs that need it are left for a later invocation.
    """
    failed: dict[Path, str] = {}
    busy: set[Path] = set()
    failures = []
    for index, run in enumerate(runs, 1):
        prefix = f"[{index}/{len(runs)}] {run.experiment}/{run.name}"
        if run.done(ctx):
            if (result := current_result(run, ctx)) != read_json(run.result_file):
                write_json(run.result_file, result)  # recorded before its training had finished
            print(f"{prefix}: done, skipped ({rel(run.result_file)})", flush=True)
            continue
        try:
            for job in run.jobs:
                if job.output_dir in busy and not job.done():
                    raise JobBusy(job)
                if job.output_dir in failed:
                    raise JobFailed(f"needs {rel(job.output_dir)}, which failed: {failed[job.output_dir]}")
                if job.done():
                    early = isinstance(job, CheckpointJob) and not job.finished()
                    state = f"saved its checkpoint {job.checkpoint}, still training" if early else "already done"
                    print(f"{prefix}: {job.tool} {state} ({rel(job.output_dir)})", flush=True)
                    continue
                action = "resuming" if job.has_checkpoint() else "running"
                log = rel(job.output_dir / f"{job.tool}.log")
                print(f"{prefix}: {action} {job.command}\n  log: {log}", flush=True)
                try:
                    execute(job, echo)
                except JobBusy:
                    busy.add(job.output_dir)
                    raise
                except JobFailed as error:
                    failed[job.output_dir] = str(error)
                    raise
        except JobBusy as error:
            print(f"{prefix}: left for later: {error}", flush=True)
            continue
        except JobFailed as error:
            failures.append(f"{run.experiment}/{run.name}: {error}")
            print(f"{prefix}: FAILED: {error}", flush=True)
            continue
        write_json(run.result_file, build_result(run, ctx))
        print(f"{prefix}: finished ({len(runs) - index} left)", flush=True)
    return failures
