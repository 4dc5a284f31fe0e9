"""Code that runs inside the user's job: the recorder and its exporter, `fit`'s micro-batching, and
the Lightning / Hugging Face adapters. torch is lazy here.

Rule: nothing here may raise into the user's training loop unless the user asked for it, and nothing
keeps GPU memory after it returns.
"""
