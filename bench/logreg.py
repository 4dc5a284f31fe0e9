"""Multinomial logistic regression with an L2 penalty, fitted by L-BFGS in numpy alone.

Fits explain's word prior (bench/explain_textmodel.py). numpy only (no scipy or scikit-learn in the test
extra); deterministic for a given input up to the last bits of the BLAS's sums, which the stored file's
rounding (explain_textmodel.DIGITS) and its --check tolerance absorb. Objective as scikit-learn's
LogisticRegression(C=...): C * cross-entropy summed over documents + 0.5 * |W|^2 (intercepts free).
"""

from __future__ import annotations

import numpy as np


def fit(X: np.ndarray, y: np.ndarray, k: int, C: float, iters: int = 1000, memory: int = 10,
        tol: float = 1e-7) -> tuple[np.ndarray, np.ndarray]:
    """Weights (d x k) and intercepts (k) minimising the objective above."""
    n, d = X.shape
    Y = np.zeros((n, k))
    Y[np.arange(n), y] = 1.0

    def value_grad(theta: np.ndarray) -> tuple[float, np.ndarray]:
        W = theta[:d * k].reshape(d, k)
        Z = X @ W + theta[d * k:]
        Z -= Z.max(axis=1, keepdims=True)
        P = np.exp(Z)
        P /= P.sum(axis=1, keepdims=True)
        f = -C * float(np.log(np.clip((P * Y).sum(axis=1), 1e-300, None)).sum()) + 0.5 * float((W * W).sum())
        G = C * (P - Y)
        return f, np.concatenate([(X.T @ G + W).ravel(), G.sum(axis=0)])

    theta = np.zeros(d * k + k)
    f, g = value_grad(theta)
    S: list[np.ndarray] = []
    R: list[np.ndarray] = []
    for _ in range(iters):
        # two-loop recursion: p = -H g
        q = g.copy()
        kept = []
        for s, r in zip(reversed(S), reversed(R)):
            rho = 1.0 / float(r @ s)
            a = rho * float(s @ q)
            kept.append((rho, a, s, r))
            q -= a * r
        if S:
            q *= float(S[-1] @ R[-1]) / float(R[-1] @ R[-1])
        for rho, a, s, r in reversed(kept):
            q += s * (a - rho * float(r @ q))
        p = -q
        step = 1.0 if S else 1.0 / max(1.0, float(np.abs(g).max()))
        slope = float(g @ p)
        while True:  # backtracking to the Armijo condition
            new = theta + step * p
            nf, ng = value_grad(new)
            if nf <= f + 1e-4 * step * slope or step < 1e-12:
                break
            step *= 0.5
        if nf > f + 1e-4 * step * slope:
            break  # no step lowers the objective enough: as close to the optimum as the sums allow
        s, r = new - theta, ng - g
        if float(r @ s) > 1e-12:
            S.append(s)
            R.append(r)
            if len(S) > memory:
                S.pop(0)
                R.pop(0)
        theta, f, g = new, nf, ng
        if float(np.abs(g).max()) < tol * max(1.0, abs(f)):
            break
    return theta[:d * k].reshape(d, k), theta[d * k:]
