"""Blind: each row's four INT32 slots pick values out of its sixteen FP32 ones, summed in a
plain Python loop: CPU work per row outside numpy, on one instance."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            slots = pb_utils.get_input_tensor_by_name(request, "SLOTS").as_numpy()
            values = pb_utils.get_input_tensor_by_name(request, "VALUES").as_numpy()
            scores = []
            for row_slots, row_values in zip(slots.tolist(), values.tolist(), strict=True):
                total = 0.0
                for slot in row_slots:
                    for k in range(16):
                        total += row_values[(slot + k) % 16] * (k + 1)
                scores.append(total)
            score = np.asarray(scores, dtype=np.float32).reshape(-1, 1)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SCORE", score)]))
        return responses
