"""Find the largest batch size that fits a memory budget with few real trials (pure: the probe is injected).

Why not Lightning's doubling or Accelerate's 10% walk-down: each real trial costs a process start, a
model build and three steps, and each OOM a cleanup. Peak memory of a training step is, to first
order, `a + b * batch`, so two measured points (or the estimator's prediction plus one) give a line.
Near a cap that line is only a lower bound: the allocator frees cached blocks and retries, cuDNN picks
kernels with smaller workspaces, and batches run that a line fitted below the cap says cannot (ResNet-50
under 8 GiB on an H200: the line said 78, 94 ran). The line of *allocated* memory is an upper estimate
(reserved >= allocated). So after the first points: the estimator's prediction, the line's batch, then
the band between the last batch that fitted and the first that did not is closed to within
`tolerance` (1 under 50, 2% above). The answer is always a batch that ran with its peak in the budget.

Trials: 3-5 on the simulated curves of tests/test_batch_search.py (median 4); never more than
`max_trials` (default 8), after which the best batch found is returned with a note.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

# Allocator granularity (CUDACachingAllocator: 2 MiB rounding, 20 MiB segments for 1-10 MiB requests):
# a difference between two peaks smaller than this says nothing about the slope.
RESOLUTION_BYTES = 20 * 1024 * 1024
# The second point is aimed at this share of the budget using a slope that overestimates the real one.
SECOND_POINT_SHARE = 0.5
# The estimator's first trial is aimed at this share of the budget, so a prediction that is low by up
# to 1/0.6 still runs and anchors the line on a real point.
PRIOR_POINT_SHARE = 0.6
# A reserved peak this close to the cap (or any allocator retry) means the trial ran under pressure.
PRESSURE_SHARE = 0.99
# A measured peak this far (share of the budget) from the line's prediction marks the curve non-linear.
NONLINEAR_TOLERANCE = 0.02


@dataclass(frozen=True)
class ProbeResult:
    """What one real trial reports. `peak_bytes` is torch.cuda.max_memory_reserved() over the steps."""

    outcome: str  # "ok", "oom", "timeout"
    peak_bytes: int | None = None
    static_bytes: int | None = None  # allocated after the steps minus the batch's inputs: params + optimizer state
    grad_bytes: int | None = None  # bytes of the trainable parameters' gradients
    seconds: float = 0.0
    detail: str = ""
    # Peak *allocated* memory during forward+backward only (optimizer.step excluded). It is linear in the
    # batch even where the reserved peak is flat because the optimizer step sets it (a hinge).
    fb_peak_bytes: int | None = None
    allocated_peak_bytes: int | None = None  # overall peak allocated (torch.cuda.max_memory_allocated)
    throughput: float | None = None  # samples/s (tokens/s with --dim seq) over the steps after the first
    alloc_retries: int | None = None  # num_alloc_retries during the steps: cache flushed to retry cudaMalloc
    survived_ooms: int | None = None  # num_ooms during the steps the job survived (cuDNN workspace fallbacks)

    @property
    def line_bytes(self) -> int | None:
        """The peak as the activations' line sees it: the reserved peak less what the optimizer step
        allocated above forward+backward (that part is flat in the batch)."""
        if self.peak_bytes is None:
            return None
        if self.fb_peak_bytes is None or self.allocated_peak_bytes is None:
            return self.peak_bytes
        return self.peak_bytes - max(0, self.allocated_peak_bytes - self.fb_peak_bytes)

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


@dataclass(frozen=True)
class Trial:
    batch: int
    purpose: str  # "estimator", "measure", "predicted", "refine", "step-down"
    result: ProbeResult
    predicted_bytes: int | None = None


@dataclass(frozen=True)
class LinearFit:
    """memory(batch) = intercept + slope * batch, in bytes."""

    intercept: float
    slope: float
    source: str = "measured"  # "measured", "estimator", "measured+resolution"

    def predict(self, batch: float) -> float:
        return self.intercept + self.slope * batch

    def largest_within(self, budget: float) -> int | None:
        """The largest batch >= 1 the line keeps within `budget`; None if batch 1 already exceeds it."""
        if self.slope <= 0:
            return None if self.predict(1) > budget else 1 << 62
        b = math.floor((budget - self.intercept) / self.slope)
        return b if b >= 1 else None

    def formula(self) -> str:
        mib = 1024 * 1024
        return f"memory(batch) = {self.intercept / mib:,.1f} MiB + {self.slope / mib:,.3f} MiB x batch"

    @classmethod
    def through(cls, p: tuple[int, int], q: tuple[int, int], source: str = "measured",
                min_slope: float = 0.0) -> LinearFit:
        """The secant through two measured points, anchored on the larger batch.

        `min_slope` (the slope of the forward+backward peak) guards against a flat start: at small
        batches the peak is often the optimizer step's, not the activations', so the secant from
        there under-estimates the slope of the part of the curve that matters.
        """
        (b1, m1), (b2, m2) = sorted([p, q])
        if b2 == b1:
            raise ValueError("two distinct batch sizes are needed")
        slope = (m2 - m1) / (b2 - b1)
        if slope < min_slope:
            return cls(intercept=m2 - min_slope * b2, slope=min_slope, source=f"{source}+fwd/bwd slope")
        if slope * (b2 - b1) < RESOLUTION_BYTES:
            # The peaks differ by less than the allocator's granularity: take the largest slope the
            # measurements allow, so the next prediction errs towards a smaller batch.
            slope = (max(m2 - m1, 0) + RESOLUTION_BYTES) / (b2 - b1)
            source = f"{source}+resolution"
        return cls(intercept=m2 - slope * b2, slope=slope, source=source)


@dataclass(frozen=True)
class SearchResult:
    batch_size: int | None
    limit_bytes: int
    margin: float
    budget_bytes: int
    trials: tuple[Trial, ...]
    fit: LinearFit | None
    verified: str  # "ran": the answer itself ran; "between": between two batches that ran; "none"
    stopped_by: str  # "budget", "max", "min-does-not-fit"
    notes: tuple[str, ...] = field(default=())

    @property
    def measured(self) -> list[tuple[int, int]]:
        return sorted((t.batch, t.result.peak_bytes) for t in self.trials
                      if t.result.ok and t.result.peak_bytes is not None)

    @property
    def predicted_peak_bytes(self) -> int | None:
        if self.batch_size is None:
            return None
        for b, peak in self.measured:
            if b == self.batch_size:
                return peak
        return int(self.fit.predict(self.batch_size)) if self.fit else None


class _Search:
    def __init__(self, probe: Callable[[int], ProbeResult], limit: int, margin: float, lo: int, hi: int,
                 max_trials: int, on_trial: Callable[[Trial], None] | None):
        self.probe, self.limit, self.margin, self.lo, self.hi = probe, limit, margin, lo, hi
        self.max_batch = hi
        self.budget = int((1.0 - margin) * limit)
        self.max_trials, self.on_trial = max_trials, on_trial
        self.trials: list[Trial] = []
        self.notes: list[str] = []

    def run(self, batch: int, purpose: str, fit: LinearFit | None) -> ProbeResult:
        predicted = int(fit.predict(batch)) if fit else None
        result = self.probe(batch)
        trial = Trial(batch, purpose, result, predicted)
        self.trials.append(trial)
        if self.on_trial:
            self.on_trial(trial)
        return result

    def left(self) -> int:
        return self.max_trials - len(self.trials)

    def clamp(self, b: int | None) -> int:
        return self.lo if b is None else max(self.lo, min(self.hi, b))

    def fits(self) -> list[tuple[int, int]]:
        """Batches that ran with a peak within the budget."""
        return sorted((t.batch, t.result.peak_bytes) for t in self.trials
                      if t.result.ok and t.result.peak_bytes is not None and t.result.peak_bytes <= self.budget)

    def ran(self) -> list[tuple[int, int]]:
        return sorted((t.batch, t.result.peak_bytes) for t in self.trials
                      if t.result.ok and t.result.peak_bytes is not None)

    def failed(self) -> list[int]:
        return sorted(t.batch for t in self.trials if not t.result.ok)

    def result(self, batch: int | None, fit: LinearFit | None, verified: str, stopped_by: str) -> SearchResult:
        return SearchResult(batch, self.limit, self.margin, self.budget, tuple(self.trials), fit,
                            verified, stopped_by, tuple(self.notes))


def search(probe: Callable[[int], ProbeResult], limit_bytes: int, *, margin: float = 0.05,
           min_batch: int = 1, max_batch: int = 8192, prior: LinearFit | None = None,
           max_trials: int = 8, on_trial: Callable[[Trial], None] | None = None) -> SearchResult:
    """Largest batch in [min_batch, max_batch] whose peak stays within (1 - margin) * limit_bytes.

    `probe(batch)` runs one real trial. `prior` is a predicted line (the estimator's); without it two
    batches are measured first. `max_trials` bounds the search whatever happens (typically 4).
    """
    if not 0 <= margin < 1:
        raise ValueError("margin must be in [0, 1)")
    if min_batch < 1 or max_batch < min_batch:
        raise ValueError("need 1 <= min_batch <= max_batch")
    if max_trials < 1:
        raise ValueError("max_trials must be >= 1")
    s = _Search(probe, limit_bytes, margin, min_batch, max_batch, max_trials, on_trial)

    fit = _first_points(s, prior)
    if fit is None:  # nothing ran
        if not s.fits():
            s.notes.append(f"batch {min_batch} does not fit in {limit_bytes} bytes")
            return s.result(None, None, "none", "min-does-not-fit")
    return _verify_and_refine(s, fit, prior)


def _first_points(s: _Search, prior: LinearFit | None) -> LinearFit | None:
    """One or two trials that give a measured line (or None if even the smallest batch failed)."""
    if prior is not None:
        b1 = s.clamp(prior.largest_within(PRIOR_POINT_SHARE * s.budget))
        r1 = s.run(b1, "estimator", prior)
        if r1.ok:
            # The estimator's slope, anchored on the real point (it is better at the slope than at the
            # constant part: context, workspaces, allocator slack), and at least the slope this trial
            # shows: at a batch this large, what forward+backward held above parameters, optimizer
            # state and gradients is nearly all activations.
            slope, source = prior.slope, "estimator+1 point"
            if r1.fb_peak_bytes:
                seen = (r1.fb_peak_bytes - (r1.static_bytes or 0) - (r1.grad_bytes or 0)) / b1
                if seen > slope:
                    slope, source = seen, "estimator+1 point, measured slope"
            return LinearFit(intercept=r1.line_bytes - slope * b1, slope=slope, source=source)
        s.notes.append(f"the estimator's batch {b1} did not fit ({r1.outcome}); measuring instead")
        s.hi = min(s.hi, b1 - 1)
        if s.hi < s.lo:
            return None
    b1 = s.lo
    r1 = s.run(b1, "measure", None)
    if not r1.ok:
        return None
    if b1 >= s.hi:
        return LinearFit(r1.peak_bytes, 0.0, "single point")
    # A slope that overestimates the real one, from one point: everything of the forward+backward peak
    # above parameters, optimizer state and gradients is counted as growing with the batch.
    fixed = (r1.static_bytes or 0) + (r1.grad_bytes or 0)
    top = r1.fb_peak_bytes if r1.fb_peak_bytes else r1.peak_bytes
    guess = max((top - fixed) / b1, 1.0)
    b2 = b1 + math.floor((SECOND_POINT_SHARE * s.budget - r1.peak_bytes) / guess)
    b2 = min(s.hi, max(b2, 2 * b1, b1 + 1))
    r2 = s.run(b2, "measure", None)
    if not r2.ok:
        # The guess was not an upper bound after all: use the limit as a lower bound of that peak.
        return LinearFit.through((b1, r1.peak_bytes), (b2, s.limit), "measured+oom bound")
    return LinearFit.through((b1, r1.line_bytes), (b2, r2.line_bytes), min_slope=_fb_slope(s, b1, b2))


def _fb_slope(s: _Search, b1: int, b2: int) -> float:
    """Slope of the forward+backward allocated peak between two batches that ran (0 if unknown)."""
    fb = {t.batch: t.result.fb_peak_bytes for t in s.trials if t.result.ok and t.result.fb_peak_bytes}
    if b1 in fb and b2 in fb and b2 != b1:
        return max(0.0, (fb[b2] - fb[b1]) / (b2 - b1))
    return 0.0


def tolerance(batch: int) -> int:
    """How far below the true edge an answer may be: 1 under 50, else 2% (floor)."""
    return 1 if batch < 50 else max(1, int(0.02 * batch))


def _upper_line(s: _Search) -> LinearFit | None:
    """The line of the *allocated* peak through the two largest batches that ran.

    Reserved memory is at least allocated, so where this line crosses the budget the batch cannot fit:
    an upper estimate of the edge. Near a cap the reserved line is not: the allocator frees cached
    blocks and retries, cuDNN falls back to smaller workspaces, and batches run that the reserved line
    (fitted below the cap, with the cache's slack) says cannot.
    """
    pts = sorted((t.batch, t.result.allocated_peak_bytes or t.result.fb_peak_bytes) for t in s.trials
                 if t.result.ok and (t.result.allocated_peak_bytes or t.result.fb_peak_bytes))
    pts = [p for i, p in enumerate(pts) if i == len(pts) - 1 or pts[i + 1][0] != p[0]]
    if len(pts) < 2:
        return None
    (b1, m1), (b2, m2) = pts[-2], pts[-1]
    slope = (m2 - m1) / (b2 - b1)
    if slope <= 0:
        return None
    return LinearFit(m2 - slope * b2, slope, "allocated")


def _bracket(s: _Search) -> tuple[int | None, int | None]:
    """(largest batch that fitted, smallest batch that did not: OOM, timeout, or a peak over the budget)."""
    fits = [b for b, _ in s.fits()]
    lo = fits[-1] if fits else None
    over = [t.batch for t in s.trials if not t.result.ok or (t.result.peak_bytes or 0) > s.budget]
    over = [b for b in over if lo is None or b > lo]
    return lo, (min(over) if over else None)


def _converged(s: _Search, lo: int | None, hi: int | None) -> bool:
    if lo is None:
        return hi is not None and hi <= s.lo
    if lo >= s.max_batch or lo >= s.hi:
        return True
    return hi is not None and hi - 1 - lo <= tolerance(lo)


def _verify_and_refine(s: _Search, fit: LinearFit, prior: LinearFit | None) -> SearchResult:
    """Search the band between the last batch that fitted and the first that did not.

    Guesses, in order, each tried once if it lies inside the band: the estimator's prediction, then the
    line's (the reserved line under a margin, where memory below the cap stays linear; at margin 0 just
    under the allocated line's edge, since near the cap the reserved line is only a lower bound). Then
    one probe just above the band's floor or just under its ceiling when the band is nearly closed,
    galloping up while no batch has failed, else interpolation (the secant of two measured peaks) or
    bisection. Stops when the band is within `tolerance` of the answer, or at `max_trials`.
    """
    guesses: list[tuple[int, str]] = []
    if prior is not None and (p := prior.largest_within(s.budget)) is not None:
        guesses.append((p, "estimator-prediction"))
    gallop = 0
    while s.left() > 0:
        lo, hi = _bracket(s)
        if _converged(s, lo, hi):
            break
        # Under a margin the budget sits below the cap, where the allocator is under no pressure and the
        # reserved line holds; the allocated line is then only a loose bound, and is not used.
        upper = _upper_line(s) if s.margin == 0 else None
        u = upper.largest_within(s.budget) if upper else None
        u = min(u, s.hi) if u is not None else None
        low = fit.largest_within(s.budget)
        if not any(g[1] == "predicted" for g in guesses):
            if s.margin > 0 or u is None:
                g = low
            else:  # just under the allocated line's edge, or --max if the edge lies beyond it
                g = s.hi if u >= s.hi else max(low or 0, u - tolerance(u))
            if g is not None:
                guesses.append((g, "predicted"))
        ceiling = s.hi if hi is None else hi - 1
        floor = s.lo if lo is None else lo + 1
        tried = {t.batch for t in s.trials}
        target, purpose = None, ""
        for g, why in guesses:
            g = min(g, s.hi) if g is not None else None  # a guess beyond --max: --max itself
            if g is not None and floor <= g <= ceiling and g not in tried and why not in {t.purpose for t in s.trials}:
                target, purpose = g, why
                break
        if target is None and hi is None and lo is not None and low is not None and low > lo + tolerance(lo) \
                and low not in tried and (u is None or low < u):
            target, purpose = min(low, s.hi), "refit"  # the line through the two largest fits moved up
        if target is None:
            target, purpose, gallop = _next(s, lo, hi, u, low, gallop)
        if target is not None:
            target = max(floor, min(ceiling, target))
        if target is None or target in tried:
            break
        r = s.run(target, purpose, fit)
        if r.ok and r.peak_bytes is not None and abs(r.peak_bytes - fit.predict(target)) > NONLINEAR_TOLERANCE * s.budget:
            s.notes.append(f"non-linear: at batch {target} the peak was {r.peak_bytes} bytes, the line "
                           f"predicted {int(fit.predict(target))}")
        fit = _refit(s, fit)
    lo, hi = _bracket(s)
    if lo is not None and not _converged(s, lo, hi):
        s.notes.append(f"stopped after {len(s.trials)} trials: the edge lies between {lo} and "
                       f"{hi - 1 if hi else s.hi}, the answer may be up to {(hi - 1 if hi else s.hi) - lo} below it")
    return _answer(s, fit)


def _next(s: _Search, lo: int | None, hi: int | None, u: int | None, low: int | None,
          gallop: int) -> tuple[int | None, str, int]:
    """The next batch inside the band (lo, hi) and why; `u` is the allocated line's edge (an upper
    estimate, margin 0 only), `low` the reserved line's (right below the cap, a lower bound at it)."""
    if lo is None:
        return (max(s.lo, hi // 2) if hi is not None else s.lo), "band", gallop
    tol = tolerance(lo)
    top = hi
    if u is not None and u >= lo and (hi is None or u + 1 < hi):
        top = u + 1  # where allocated memory alone exceeds the budget: fails unless the line is wrong
    if top is None:  # nothing failed and no estimate above: gallop up from the last fit
        # first just above the tolerance (the line put the edge at lo), then 5%, 10%, 20%... higher
        step = tol + 1 if gallop == 0 else max(tol + 1, math.ceil(0.05 * lo)) << (gallop - 1)
        return min(s.hi, lo + step), "probe-up", gallop + 1
    if top - 1 - lo <= tol:  # closed by the allocated line alone: one trial confirms the edge
        return lo + tol + 1, "confirm-edge", gallop
    width = top - 1 - lo
    if width <= 2 * tol + 1:  # one trial can close it: a fit just under the top or a failure just above lo
        return top - 1 - tol, "band", gallop
    guess = None
    above = [t for t in s.trials if t.batch == hi and t.result.ok and t.result.peak_bytes
             and not _pressured(s, t.result)]
    below = [t for t in s.trials if t.batch == lo and t.result.ok and t.result.peak_bytes]
    if top == hi and above and below:  # two measured peaks around the budget: their secant, one segment of room
        line = LinearFit.through((lo, below[0].result.peak_bytes), (hi, above[0].result.peak_bytes))
        guess = line.largest_within(s.budget - RESOLUTION_BYTES)
    elif top != hi:
        guess = top - 1 - tolerance(top)  # just under the allocated line's edge
    elif low is not None and low <= lo + tol:
        return lo + tol + 1, "confirm-edge", gallop  # the reserved line puts the edge at lo: confirm it
    elif low is not None:
        guess = low
    if guess is None or not lo < guess < top:
        guess = (lo + top) // 2
    return guess, "band", gallop


def _pressured(s: _Search, r: ProbeResult) -> bool:
    """A trial that ran at the cap: the allocator retried, so its reserved peak is the cap, not the line's."""
    return bool(r.alloc_retries) or (r.peak_bytes or 0) >= PRESSURE_SHARE * s.limit


def _refit(s: _Search, fit: LinearFit) -> LinearFit:
    """The secant of the reserved peak through the two largest batches that ran below the cap's
    pressure (the lower-bound line)."""
    line = {t.batch: t.result.line_bytes for t in s.trials
            if t.result.ok and t.result.peak_bytes is not None and not _pressured(s, t.result)}
    ran = [(b, line[b]) for b, _ in s.ran() if b in line]
    if len(ran) >= 2:
        fb = _fb_slope(s, ran[-2][0], ran[-1][0])
        return LinearFit.through(ran[-2], ran[-1], "measured", min_slope=fb)
    return fit


def _answer(s: _Search, fit: LinearFit) -> SearchResult:
    """The largest batch that ran with its peak within the budget: always one that was tried."""
    ran, fits = s.ran(), s.fits()
    if not fits:
        if ran:
            s.notes.append(f"batch {ran[0][0]} ran but its peak exceeds the budget; no smaller batch allowed")
        else:
            s.notes.append(f"batch {s.lo} does not fit")
        return s.result(None, fit, "none", "min-does-not-fit")
    answer = fits[-1][0]
    stopped = "max" if answer >= s.max_batch else "budget"
    return s.result(answer, fit, "ran", stopped)


THROUGHPUT_SHARE = 0.98


def recommend(result: SearchResult) -> dict:
    """The smallest batch within 2% of the best measured throughput, and the pressure at the largest.

    Only batches that fitted count. Throughput usually saturates well below the memory edge: the
    largest batch buys memory pressure (allocator retries, smaller cuDNN workspaces), not speed.
    """
    fits = {b for b, _ in _fits(result)}
    rated = sorted((t.batch, t.result.throughput) for t in result.trials
                   if t.batch in fits and t.result.ok and t.result.throughput)
    out: dict = {"recommended_batch_size": None, "best_throughput": None, "best_throughput_batch": None,
                 "throughput_at_max": None, "pressure": None}
    if rated:
        best_b, best = max(rated, key=lambda bt: bt[1])
        rec = min(b for b, v in rated if v >= THROUGHPUT_SHARE * best)
        out.update(recommended_batch_size=rec, best_throughput=best, best_throughput_batch=best_b)
    top = [t for t in result.trials if t.batch == result.batch_size and t.result.ok]
    if top:
        r = top[-1].result
        out["throughput_at_max"] = r.throughput
        if r.alloc_retries is not None or r.survived_ooms is not None:
            retries, ooms = r.alloc_retries or 0, r.survived_ooms or 0
            out["pressure"] = {"alloc_retries": retries, "survived_ooms": ooms,
                               "under_pressure": bool(retries or ooms)}
    return out


def _fits(result: SearchResult) -> list[tuple[int, int]]:
    return [(b, p) for b, p in result.measured if p <= result.budget_bytes]


def summarize(result: SearchResult) -> dict:
    """JSON-ready view of a search (the CLI's and the validation's payload)."""
    return {
        "max_batch_size": result.batch_size,
        "memory_limit_bytes": result.limit_bytes,
        "margin": result.margin,
        "budget_bytes": result.budget_bytes,
        "verified": result.verified,
        "stopped_by": result.stopped_by,
        "predicted_peak_bytes": result.predicted_peak_bytes,
        "fit": None if result.fit is None else {
            "intercept_bytes": int(result.fit.intercept), "slope_bytes_per_sample": result.fit.slope,
            "source": result.fit.source, "formula": result.fit.formula()},
        "trials": [{"batch": t.batch, "purpose": t.purpose, "outcome": t.result.outcome,
                    "peak_reserved_bytes": t.result.peak_bytes, "predicted_bytes": t.predicted_bytes,
                    "seconds": round(t.result.seconds, 3), "detail": t.result.detail,
                    "allocated_peak_bytes": t.result.allocated_peak_bytes, "throughput": t.result.throughput,
                    "alloc_retries": t.result.alloc_retries, "survived_ooms": t.result.survived_ooms}
                   for t in result.trials],
        "notes": list(result.notes),
        **recommend(result),
    }
