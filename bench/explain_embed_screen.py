"""Would a pretrained sentence embedding read OOM reports better than the word prior? A screen on dev only.

The word prior (explain/textmodel.py: tf-idf of words and character n-grams, logistic regression) is fitted on
confirmed reports; a sentence embedding brings knowledge from elsewhere (similar meaning in other words). This
screen compares, text alone, 5-fold out of fold on the dev split (the folds of bench/explain_cv.py, seed 17, the
silver items in every training fold): the word prior; a logistic regression on all-MiniLM-L6-v2 embeddings (mean
of the token states over at most 4 chunks of 254 tokens of the text the prior reads, unit length); and the mean
and geometric mean of their probabilities. The decision rule, written before the run (docs/explain-design.md,
"A sentence-embedding prior"): go on to the whole pipeline only if a combination beats the word prior alone by
3 points of top-1.

Needs torch, transformers and a local copy of sentence-transformers/all-MiniLM-L6-v2 (no download here):
  PYTHONPATH=src python bench/explain_embed_screen.py --model-dir DIR [--cache DIR] [--C 0.3 1 3]
The embeddings take ~7 minutes per 1,000 texts on one CPU core; --cache keeps them between runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import explain_corpus as C  # noqa: E402
import explain_cv as CV  # noqa: E402
import explain_textmodel as TM  # noqa: E402
import logreg  # noqa: E402

CHUNK = 254  # tokens per chunk, plus [CLS] and [SEP]: the model's 256
CHUNKS = 4


def embedder(model_dir: str):
    import torch
    from transformers import AutoModel, AutoTokenizer

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).eval()

    def embed(text: str) -> np.ndarray:
        ids = tok(text, add_special_tokens=False, truncation=False)["input_ids"]
        chunks = [ids[i:i + CHUNK] for i in range(0, max(len(ids), 1), CHUNK)][:CHUNKS]
        vs = []
        with torch.no_grad():
            for ch in chunks:
                x = torch.tensor([[tok.cls_token_id, *ch, tok.sep_token_id]])
                v = model(input_ids=x, attention_mask=torch.ones_like(x)).last_hidden_state[0].mean(0)
                vs.append(v / v.norm())
        v = torch.stack(vs).mean(0)
        return (v / v.norm()).numpy()

    return embed


def embeddings(name: str, items: list[dict], embed, cache: Path | None) -> np.ndarray:
    path = cache / f"emb_{name}.npy" if cache else None
    if path is not None and path.exists():
        return np.load(path)
    X = np.stack([embed(TM.model_text(c["text"], tags=False)) for c in items])
    if path is not None:
        np.save(path, X)
    return X


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True, help="a local all-MiniLM-L6-v2 (config, tokenizer, weights)")
    ap.add_argument("--cache", type=Path, help="keep the embeddings here")
    ap.add_argument("--C", type=float, nargs="+", default=[0.3, 1.0, 3.0], help="the embedding regression's C")
    args = ap.parse_args(argv)
    dev, silver = C.load_reports("dev"), C.load_silver()
    embed = embedder(args.model_dir)
    Xd, Xs = embeddings("dev", dev, embed, args.cache), embeddings("silver", silver, embed, args.cache)
    cats = list(C.CATEGORIES)
    yd = np.array([cats.index(c["category"]) for c in dev])
    ys = np.array([cats.index(c["category"]) for c in silver])
    texts = [TM.model_text(c["text"]) for c in dev]
    fl = CV.folds(dev, 5)
    from oomdoctor.explain.textmodel import TextModel

    words = {}
    for k in range(5):
        train = [i for j in range(5) if j != k for i in fl[j]]
        tm = TextModel(TM.fit_prior([(texts[i], dev[i]["category"]) for i in train] + list(TM.silver_docs())))
        words[k] = np.array([[tm.posterior(texts[i]).get(c, 0.0) for c in cats] for i in fl[k]])
    print(f"dev: {len(dev)} reports, 5 folds; top-1 / top-2 out of fold, text alone")
    print(f"{'C':>5}  {'words':>11}  {'embedding':>11}  {'mean':>11}  {'geo mean':>11}")
    for c_pen in args.C:
        hits = {n: [0, 0] for n in ("words", "emb", "mean", "geo")}
        for k in range(5):
            train = [i for j in range(5) if j != k for i in fl[j]]
            W, b = logreg.fit(np.vstack([Xd[train], Xs]), np.concatenate([yd[train], ys]), len(cats), c_pen)
            Z = Xd[fl[k]] @ W + b
            Z -= Z.max(1, keepdims=True)
            pe = np.exp(Z)
            pe /= pe.sum(1, keepdims=True)
            pw = words[k]
            for name, P in (("words", pw), ("emb", pe), ("mean", (pw + pe) / 2),
                            ("geo", np.exp((np.log(pw + 1e-9) + np.log(pe + 1e-9)) / 2))):
                o = np.argsort(-P, 1)
                y = yd[fl[k]]
                hits[name][0] += int((o[:, 0] == y).sum())
                hits[name][1] += int(((o[:, 0] == y) | (o[:, 1] == y)).sum())
        print(f"{c_pen:>5}  " + "  ".join(f"{a:>5} / {b:<4}" for a, b in hits.values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
