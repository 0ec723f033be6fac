"""IEEE-style formats PyTorch multiplies natively: fp32 (TF32 off), tf32, bf16, fp16 (`recipes`).

No parameters. bf16 is the update-side recipes' reference (`suite.precisions.update`): fp32
parameters, which are the master weights, under bf16 autocast.
"""

from suite.scenario.declare import PrecisionRecord

CODE = "suite.precisions.floating.recipes"
PRECISIONS = {
    "fp32": PrecisionRecord(f"{CODE}:FP32", peak="fp32", description="IEEE float32; TF32 explicitly off"),
    "tf32": PrecisionRecord(f"{CODE}:TF32", peak="tf32",
                            description="float32 storage, TF32 tensor-core matmul (10-bit mantissa)"),
    "bf16": PrecisionRecord(f"{CODE}:BF16", peak="bf16", description="bfloat16 operands, float32 accumulation"),
    "fp16": PrecisionRecord(f"{CODE}:FP16", peak="fp16", description="float16 operands, float32 accumulation"),
    "fp16_noscaler": PrecisionRecord(f"{CODE}:FP16_NOSCALER", peak="fp16",
                                     description="float16 autocast without a GradScaler (shows gradient underflow)"),
}
