"""`oomdoctor estimate`: peak GPU memory of a step, predicted on the CPU.

    hf            `estimate --model`: LLM recipes from a Hugging Face config, reduced-depth composition
    estimator     entry points (estimate, estimate_module, max_batch) and the breakdown
    trace         run the workload under fake tensors and record every allocation (torch)
    cuda_semantics, workspace_ops
                  what a CUDA kernel would allocate that a CPU trace cannot see (torch)
    fake_module   Module._apply (.to(dtype), .half()) for fake parameters, tied weights kept (torch)
    memtrace, allocator, alloc_conf
                  replay the trace through a model of PyTorch's caching allocator (pure)
    workspaces, reduce_staging, cudnn_splitk_h100
                  measured knowledge of library workspaces (pure tables)
    parallel      per-rank answer: traced DDP/FSDP2 shaped, ZeRO arithmetic on the single-GPU breakdown (pure)
    parallel_trace  DDP / FSDP2 over torch's fake process group, for tracing rank 0 (measured on 2 and 4 GPUs)
    deepspeed_emulation
                  DeepSpeed ZeRO-2/3's tensors as an optimizer object, for tracing rank 0 (torch)
"""
