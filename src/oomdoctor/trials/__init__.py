"""`oomdoctor max-batch`: real trials in child processes, searched for the largest batch that runs.

    search      which batch to try next, from the trials so far and the estimator's prediction (pure)
    max_batch   the orchestrator: starts each trial as a child process with a time limit
    child       one trial: three real steps of the workload on the GPU, reported as one JSON line
"""
