"""C[M, N] = A[M, K] @ B[K, N] (`workload`): the kernel every other workload is made of."""

from suite.scenario.declare import WorkloadRecord

WORKLOADS = {
    "gemm": WorkloadRecord("suite.workloads.gemm.workload:GEMM", shaped=True, roofline="matmul",
                           description="one GEMM in the recipe's format, checked against float64"),
}
