"""Code that runs inside (or around) the user's job: tracing, recording, fitting. torch is lazy here.

Rule: nothing here may raise into the user's training loop unless the user asked for it.
"""
