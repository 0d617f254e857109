"""A fast mutation fuzzer for rmq's compiled entry points (issue #30): ``make fuzz-long``.

Hypothesis draws a few thousand inputs a second, so the ten million inputs the issue asks of the
compiled decoders would take hours that way. This driver calls each entry point of
``rmq.protocol._fastframe`` and ``rmq.protocol._faststore`` directly in process with a mutated input
and little Python around the call: seeds are real frames and records built by rmq's own encoders
(:mod:`rmq.testing.fuzztargets`), the mutations are the classic ones (bit flips, interesting integers
at length offsets, dictionary tokens of the JSON headers and properties, inserts, deletes, splices,
truncation, re-framing of a mutated header), and an input whose outcome has not been seen before
joins its target's corpus (a cheap stand-in for coverage). Each target checks its invariants on
every input and compares with the pure-Python reference on a sample.

Run under AddressSanitizer/UBSan builds of the extensions (``make fuzz-long``), a memory error aborts
the worker; the supervisor then saves the input it was running (every input is first written to a
shared mapping, which survives the abort) under ``.venv/fuzz-crashes/`` and prints a replay command.
An invariant breach is saved the same way. ``python -m rmq.testing.fuzzdrive --help`` for the options.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import mmap
import os
import random
import re
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["Breach", "Mutator", "Target", "fuzz", "main"]

MAX_INPUT = 1 << 16  # inputs are cut to this: the decoders' edge cases are in small inputs
_LAST = struct.Struct("<HI")  # the last-input mapping's header: target index, length
_DIGITS = re.compile(rb"[0-9]+")


class Breach(AssertionError):
    """An invariant of an entry point does not hold for an input."""


class Target:
    """One compiled entry point: seeds, a run with invariants on every input, a reference check on a
    sample. ``run`` must raise only :class:`Breach` (or let an unexpected exception through) on a bug."""

    name = ""
    weight = 1
    tokens: Sequence[bytes] = ()  # dictionary tokens for this target's mutations

    def seeds(self) -> list[bytes]:
        raise NotImplementedError

    def run(self, data: bytes) -> Any:
        """Call the entry point on ``data``; return a small hashable outcome (new ones grow the corpus)."""
        raise NotImplementedError

    def check(self, data: bytes) -> None:
        """Compare with the pure-Python reference (called on a sample of the inputs)."""

    def reframe(self, rng: random.Random, mutate: Callable[[bytes], bytes]) -> bytes | None:
        """An input built from mutated parts with valid framing, or None when the target has no framing."""
        return None


# ------------------------------------------------------------------ mutations

_INTS32 = (0, 1, 3, 4, 7, 8, 16, 20, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0x8000, 0xFFFF, 0x10000, 0xFFFFFF,
           0x1000000, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFF8)
_BASE_TOKENS = (b"{", b"}", b'"', b",", b":", b"\\", b"\\u", b"\\u0001", b"\\u0002", b"\\ud800", b"\\udc00",
                b"\\ud83d\\ude00", b"\x00", b"\x01", b"\x02", b"\x7f", b"\x80", b"\xc3\xa9", b"\xed\xa0\x80",
                b"\xf0\x9f\x98\x80", b"\xff", b"-", b"-0", b"0", b"00", b"2147483647", b"2147483648",
                b"-2147483649", b"9223372036854775807", b"99999999999999999999", b"1e3", b"1.5", b"null",
                b"true", b"false", b" ", b"\n")


class Mutator:
    """Byte-level mutations of one input, a few at a time, drawn from ``rng`` (``random()`` scaled to an
    index: a third of ``choice``/``randrange``'s cost, which is most of this driver's own)."""

    def __init__(self, rng: random.Random, tokens: Sequence[bytes], splice_from: list[bytes]) -> None:
        self.rnd = rng.random
        self.bits = rng.getrandbits
        self.bytes = rng.randbytes
        self.tokens = tuple(tokens) + _BASE_TOKENS
        self.pool = splice_from  # the target's corpus: splices take a piece of another input
        self.ops = (self.flip, self.flip, self.set_byte, self.int32, self.int32, self.token, self.token,
                    self.insert, self.delete, self.dup, self.splice, self.truncate, self.digits)

    def __call__(self, data: bytes) -> bytes:
        b = bytearray(data)
        ops, rnd = self.ops, self.rnd
        for _ in range(1 + (self.bits(3) & 3)):
            ops[int(rnd() * 13)](b)
        return bytes(b[:MAX_INPUT])

    def _below(self, n: int) -> int:
        return int(self.rnd() * n)

    def _at(self, b: bytearray) -> int:
        """An offset: often a frame's length or header word (0, 4) or near the end, else anywhere."""
        n = len(b)
        if self.bits(3) == 0:
            return min(n, (0, 4, 8, 16)[self.bits(2)])
        return int(self.rnd() * (n + 1))

    def flip(self, b: bytearray) -> None:
        if b:
            b[int(self.rnd() * len(b))] ^= 1 << self.bits(3)

    def set_byte(self, b: bytearray) -> None:
        if b:
            b[int(self.rnd() * len(b))] = self.bits(8)

    def int32(self, b: bytearray) -> None:
        """An interesting integer (or the input's own length, give or take) as a big-endian 32/16-bit word."""
        bits = self.bits
        v = _INTS32[self._below(len(_INTS32))] if bits(1) else (len(b) + bits(4) - 8) & 0xFFFFFFFF
        i = self._at(b)
        if bits(2):
            b[i : i + 4] = v.to_bytes(4, "big")
        else:
            b[i : i + 2] = (v & 0xFFFF).to_bytes(2, "big")

    def token(self, b: bytearray) -> None:
        t = self.tokens[self._below(len(self.tokens))]
        i = self._below(len(b) + 1)
        if self.bits(1):
            b[i:i] = t
        else:
            b[i : i + len(t)] = t

    def insert(self, b: bytearray) -> None:
        i = self._below(len(b) + 1)
        b[i:i] = self.bytes(1 + self.bits(3))

    def delete(self, b: bytearray) -> None:
        if b:
            i = self._below(len(b))
            del b[i : i + 1 + self.bits(4)]

    def dup(self, b: bytearray) -> None:
        if b:
            i = self._below(len(b))
            j = min(len(b), i + 1 + self.bits(6))
            b[j:j] = b[i:j]

    def splice(self, b: bytearray) -> None:
        other = self.pool[self._below(len(self.pool))]
        if other:
            i = self._below(len(other))
            piece = other[i : i + 1 + self._below(len(other) - i)]
            at = self._below(len(b) + 1)
            if self.bits(1):
                b[at:] = piece
            else:
                b[at:at] = piece

    def truncate(self, b: bytearray) -> None:
        del b[self._below(len(b) + 1) :]

    def digits(self, b: bytearray) -> None:
        """A run of ASCII digits (a JSON number, a queue id, a length in text) replaced by another number."""
        n = len(b)
        if not n:
            return
        m = _DIGITS.search(b, self._below(n))
        if m is not None:
            v = (0, -1, 2**31, 2**31 - 1, 2**63, 10**18, 1 << self.bits(6), self.bits(10))[self.bits(3)]
            b[m.start() : m.end()] = str(v).encode()


# ------------------------------------------------------------------ the loop


class _LastInput:
    """The input being run, in a shared file mapping: readable by the supervisor after a sanitizer abort."""

    def __init__(self, path: Path | None) -> None:
        self.mm: mmap.mmap | None = None
        if path is not None:
            with open(path, "w+b") as f:
                f.truncate(_LAST.size + MAX_INPUT)
                self.mm = mmap.mmap(f.fileno(), _LAST.size + MAX_INPUT)

    def put(self, index: int, data: bytes) -> None:
        mm = self.mm
        if mm is not None:
            n = len(data)
            mm[_LAST.size : _LAST.size + n] = data
            _LAST.pack_into(mm, 0, index, n)

    @staticmethod
    def read(path: Path) -> tuple[int, bytes]:
        raw = path.read_bytes()
        index, n = _LAST.unpack_from(raw, 0)
        return index, raw[_LAST.size : _LAST.size + n]


def save_crash(crash_dir: Path, name: str, data: bytes) -> Path:
    crash_dir.mkdir(parents=True, exist_ok=True)
    path = crash_dir / f"{name}-{hashlib.sha1(data).hexdigest()[:16]}.bin"
    path.write_bytes(data)
    return path


def fuzz(targets: Sequence[Target], total: int, *, seed: int = 0, sample: int = 32,
         last: Path | None = None, corpus_max: int = 4000) -> dict[str, Any]:
    """``total`` inputs spread over ``targets`` by weight. Returns the counts, or on a breach (an
    exception out of a target) the target, the input and the error under "breach"."""
    rng = random.Random(seed)
    box = _LastInput(last)
    weights = sum(t.weight for t in targets)
    state = []
    for t in targets:
        corpus = list(dict.fromkeys(t.seeds()))
        state.append((t, corpus, Mutator(rng, t.tokens, corpus), set(), total * t.weight // weights))
    t0, c0, m0, s0, b0 = state[0]
    state[0] = (t0, c0, m0, s0, b0 + total - sum(s[4] for s in state))  # the rounding's remainder
    counts = {t.name: 0 for t in targets}
    new = {t.name: 0 for t in targets}
    start = time.monotonic()
    chunk = 512
    active = list(range(len(state)))
    while active:
        for k in list(active):
            t, corpus, mut, seen, budget = state[k]
            n = min(chunk, budget - counts[t.name])
            if n <= 0:
                active.remove(k)
                continue
            run, check, rnd, getrandbits = t.run, t.check, rng.random, rng.getrandbits
            for _ in range(n):
                r = getrandbits(4)
                if r == 0:
                    data = corpus[int(rnd() * len(corpus))]
                elif r < 4:
                    data = t.reframe(rng, mut) or mut(corpus[int(rnd() * len(corpus))])
                else:
                    data = mut(corpus[int(rnd() * len(corpus))])
                box.put(k, data)
                try:
                    outcome = run(data)
                    if getrandbits(16) % sample == 0:
                        check(data)
                except Exception as exc:  # a breach, or an exception the entry point must not raise
                    return {"counts": counts, "breach": (t.name, data, f"{type(exc).__name__}: {exc}"),
                            "seconds": time.monotonic() - start}
                if outcome not in seen and len(seen) < 100_000:
                    seen.add(outcome)
                    new[t.name] += 1
                    if len(corpus) < corpus_max:
                        corpus.append(data)
                    else:
                        corpus[getrandbits(30) % corpus_max] = data
            counts[t.name] += n
    return {"counts": counts, "outcomes": new, "seconds": time.monotonic() - start}


# ------------------------------------------------------------------ the supervisor


def _asan_env(build: Path) -> dict[str, str]:
    """The environment that loads the sanitizer builds in ``build`` (made by ``make fuzz-long``)."""
    suffix = next(build.glob("_fastframe*.so")).name[len("_fastframe"):]
    lib = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True, check=True)
    return {"RMQ_FASTFRAME": str(build / f"_fastframe{suffix}"), "RMQ_FASTSTORE": str(build / f"_faststore{suffix}"),
            "LD_PRELOAD": lib.stdout.strip(), "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
            "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}


def _env_words(env: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in env.items())


def supervise(total: int, jobs: int, asan: Path | None, crash_dir: Path, seed: int, only: list[str]) -> int:
    """Run ``jobs`` workers (each its share of ``total``), print per-entry-point counts, total and rate;
    1 on a sanitizer report, a crash or a breach (the input saved, its replay command printed)."""
    env = dict(os.environ)
    if asan is not None:
        asan = asan.resolve()
        if not list(asan.glob("_fast*.so")):
            print(f"fuzz: no sanitizer builds in {asan} (make fuzz-long builds them)")
            return 1
    extra = _asan_env(asan) if asan is not None else {}
    env.update(extra)
    crash_dir.mkdir(parents=True, exist_ok=True)
    procs = []
    start = time.monotonic()
    for j in range(jobs):
        last = crash_dir / f".last-{os.getpid()}-{j}"
        cmd = [sys.executable, "-m", "rmq.testing.fuzzdrive", "--worker", "--inputs", str(total // jobs + (j < total % jobs)),
               "--seed", str(seed + j), "--last", str(last), "--crash-dir", str(crash_dir)]
        for name in only:
            cmd += ["--target", name]
        procs.append((subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
                      last))
    counts: dict[str, int] = {}
    failed = 0
    for p, last in procs:
        out, err = p.communicate()
        lines = out.strip().splitlines()
        try:
            res = json.loads(lines[-1]) if p.returncode == 0 and lines else None
        except json.JSONDecodeError:
            res = None
        if res is None or res.get("breach"):
            failed = 1
            if res is None:  # a sanitizer abort or a crash: the input was in the shared mapping
                from rmq.testing.fuzztargets import target_names

                index, data = _LastInput.read(last)
                names = [n for n in target_names() if not only or n in only]
                path = save_crash(crash_dir, names[index], data)
                print(err[-6000:], file=sys.stderr)
                print(f"fuzz: worker exited with {p.returncode}; the input: {path}")
            else:
                path = Path(res["breach"][0])
                print(f"fuzz: invariant breach: {res['breach'][1]}\nfuzz: the input: {path}")
            print(f"fuzz: replay: {_env_words(extra)} {sys.executable} -m rmq.testing.fuzzdrive --replay {path}")
        elif asan is not None and any(Path(b or "").parent != asan for b in res["builds"]):
            failed = 1
            print(f"fuzz: a worker did not load the sanitizer builds in {asan}: {res['builds']}")
        else:
            for name, c in res["counts"].items():
                counts[name] = counts.get(name, 0) + c
        last.unlink(missing_ok=True)
    seconds = time.monotonic() - start
    for name, c in sorted(counts.items()):
        print(f"fuzz: {name:<14} {c:>10,} inputs")
    n = sum(counts.values())
    build = "AddressSanitizer/UBSan builds" if asan is not None else "the installed build"
    print(f"fuzz: {n:,} inputs in {seconds:.0f} s ({n / max(seconds, 1e-9):,.0f}/s, {jobs} worker(s), {build})"
          + (" - FAILED (counts of the failed workers left out)" if failed else ""))
    return failed


def replay(path: Path) -> int:
    """Run one saved input against its target (named by the file's prefix); 0 when nothing breaks."""
    from rmq.testing.fuzztargets import make_targets

    name = path.name.rsplit("-", 1)[0]
    (target,) = make_targets([name])
    data = path.read_bytes()
    print(f"replay: {name}, {len(data)} bytes -> {target.run(data)!r}")
    target.check(data)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rmq.testing.fuzzdrive", description=__doc__.split("\n\n")[0])
    ap.add_argument("--inputs", type=int, default=10_000_000, help="inputs in all (default 10M)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    ap.add_argument("--asan", type=Path, help="directory of the sanitizer builds of _fastframe and _faststore")
    ap.add_argument("--crash-dir", type=Path, default=Path(".venv/fuzz-crashes"))
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--target", action="append", default=[], help="only this entry point (repeatable)")
    ap.add_argument("--replay", type=Path, help="run one saved input")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--last", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.replay is not None:
        return replay(a.replay)
    if not a.worker:
        print(f"fuzz: seed {a.seed}")
        return supervise(a.inputs, a.jobs, a.asan, a.crash_dir, a.seed, a.target)
    from rmq.protocol import frame, storepath
    from rmq.testing.fuzztargets import make_targets

    res = fuzz(make_targets(a.target or None), a.inputs, seed=a.seed, last=a.last)
    res["builds"] = [getattr(frame._codec, "__file__", None), getattr(storepath.FAST, "__file__", None)]
    if "breach" in res:
        name, data, err = res["breach"]
        res["breach"] = [str(save_crash(a.crash_dir, name, data)), err]
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
