"""INPUT_A + INPUT_B -> OUTPUT_SUM for a whole batch, then a fixed sleep: a model whose
cost is time, not CPU, so that the client's own cost shows (bench/multiprocess.py)."""

import time

import numpy as np
import triton_python_backend_utils as pb_utils

SLEEP_S = 0.005


class TritonPythonModel:
    def execute(self, requests):
        a = [pb_utils.get_input_tensor_by_name(r, "INPUT_A").as_numpy() for r in requests]
        b = [pb_utils.get_input_tensor_by_name(r, "INPUT_B").as_numpy() for r in requests]
        sums = np.concatenate(a) + np.concatenate(b)
        bounds = np.cumsum([len(part) for part in a])[:-1]
        time.sleep(SLEEP_S)
        return [
            pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUTPUT_SUM", part.astype(np.float32))]
            )
            for part in np.split(sums, bounds)
        ]
