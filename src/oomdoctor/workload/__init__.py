"""A user's workload file (`build(batch_size) -> dict`) loaded and stepped: shared by the estimator
(under fake tensors) and by real trials (`max-batch`). torch is imported lazily."""
