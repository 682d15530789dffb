"""Blind: each execution waits 300 us (a device's fixed cost), then each row's weights are
summed where its flags are set, in a Python loop over the rows: part wait, part CPU, on two
instances."""

import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(300e-6)
        responses = []
        for request in requests:
            flags = pb_utils.get_input_tensor_by_name(request, "FLAGS").as_numpy()
            weights = pb_utils.get_input_tensor_by_name(request, "WEIGHTS").as_numpy()
            counts = [
                sum(w for f, w in zip(row_f, row_w, strict=True) if f)
                for row_f, row_w in zip(flags.tolist(), weights.tolist(), strict=True)
            ]
            count = np.asarray(counts, dtype=np.int32).reshape(-1, 1)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("COUNT", count)]))
        return responses
