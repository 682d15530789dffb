"""The running sum of INPUT over a sequence: state kept per correlation ID.

Triton's sequence batcher gives every request START, END, READY and CORRID; a
START resets the sum, an END forgets it, a slot that is not READY is skipped.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


def _scalar(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy().ravel()[0]


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        out = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            if not _scalar(request, "READY"):  # an idle slot's filler: no sequence moves
                tensor = pb_utils.Tensor("OUTPUT", value.astype(np.float32))
                out.append(pb_utils.InferenceResponse(output_tensors=[tensor]))
                continue
            corrid = int(_scalar(request, "CORRID"))
            if _scalar(request, "START"):
                self.sums[corrid] = np.zeros_like(value)
            total = self.sums.get(corrid, np.zeros_like(value)) + value
            self.sums[corrid] = total
            if _scalar(request, "END"):
                self.sums.pop(corrid, None)
            tensor = pb_utils.Tensor("OUTPUT", total.astype(np.float32))
            out.append(pb_utils.InferenceResponse(output_tensors=[tensor]))
        return out
