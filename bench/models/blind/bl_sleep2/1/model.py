"""Blind: FP16 features scaled by 2; each execution then waits 2 ms plus 50 us a row, as a
GPU kernel would, so the instance is busy while its CPU is not."""

import time

import numpy as np
import triton_python_backend_utils as pb_utils

FIXED_S, PER_ROW_S = 0.002, 50e-6


class TritonPythonModel:
    def execute(self, requests):
        parts = [pb_utils.get_input_tensor_by_name(r, "FEATURES").as_numpy() for r in requests]
        time.sleep(FIXED_S + PER_ROW_S * sum(len(p) for p in parts))
        return [
            pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("SCALED", (p * 2).astype(np.float16))]
            )
            for p in parts
        ]
