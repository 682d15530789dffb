"""Adds two FP32 tensors, one formed batch at a time.

Triton's dynamic batcher hands ``execute`` every request of a batch it formed.
The whole batch is computed in one vectorized numpy step (concatenate, add,
split back): that is the point of batching. A request with bad data gets an
error response of its own; it never fails the other requests of its batch.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.logger = pb_utils.Logger
        self.model_name = args["model_name"]

    def execute(self, requests):
        responses = [None] * len(requests)
        a_parts, b_parts, good = [], [], []
        for i, request in enumerate(requests):
            a = pb_utils.get_input_tensor_by_name(request, "INPUT_A")
            b = pb_utils.get_input_tensor_by_name(request, "INPUT_B")
            error = _check(a, b)
            if error:
                responses[i] = pb_utils.InferenceResponse(error=pb_utils.TritonError(error))
                continue
            a_parts.append(a.as_numpy())
            b_parts.append(b.as_numpy())
            good.append(i)

        if good:
            sums = np.concatenate(a_parts) + np.concatenate(b_parts)
            bounds = np.cumsum([len(part) for part in a_parts])[:-1]
            for i, part in zip(good, np.split(sums, bounds)):
                out = pb_utils.Tensor("OUTPUT_SUM", part.astype(np.float32, copy=False))
                responses[i] = pb_utils.InferenceResponse(output_tensors=[out])

        # Verbose level: one log line per batch is free unless --log-verbose is on.
        self.logger.log_verbose(
            f"{self.model_name}: executed a batch of {len(requests)} requests"
        )
        return responses

    def finalize(self):
        pass


def _check(a, b):
    """Return an error message for this request's inputs, or None if usable."""
    if a is None or b is None:
        return "INPUT_A and INPUT_B are both required"
    a, b = a.as_numpy(), b.as_numpy()
    if a.shape != b.shape:
        return f"INPUT_A shape {list(a.shape)} does not match INPUT_B shape {list(b.shape)}"
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return "INPUT_A and INPUT_B must be finite numbers (got NaN or infinity)"
    return None
