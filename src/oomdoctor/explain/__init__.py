"""`oomdoctor explain`: from a log to the ranked root cause. The modules follow the data:

    read        bytes of a log file, streamed in blocks (the only module here that touches files)
    prefilter   which lines may matter, found with a multi-literal matcher before any regex runs
    patterns    the message shapes (PyTorch, driver, XLA, TF, vLLM, NCCL, kernel, Kubernetes...) and
                the numbers in them
    kinds       what each event kind is and which category it hints at
    framework   whose allocator XLA's BFC line is (JAX prints it as TensorFlow does), read with its log
    events      find events in the stream, with their traceback and the log's context
    facts       events as plain records (bundles, the doctor's workload check)
    rules, rules_by_kind
                weigh the evidence of one event, of the whole log and of bundle facts, per category
    rank        the answer: calibrated, ranked hypotheses with the fact that would decide
"""
