"""Blind: a string -> a score and its count of character trigrams. Each string is decoded,
lower-cased and cut into trigrams, each hashed (CRC-32) into a weight table in a Python
loop: the cost is per row, with a small fixed part (a 128 x 128 product per batch)."""

import zlib

import numpy as np
import triton_python_backend_utils as pb_utils

BUCKETS = 1 << 14


class TritonPythonModel:
    def initialize(self, args):
        rng = np.random.default_rng(5454)
        self.weights = rng.standard_normal(BUCKETS).astype(np.float32)
        self.mix = rng.standard_normal((128, 128)).astype(np.float32) / 12

    def _score(self, raw):
        text = raw.decode("utf-8", errors="replace").lower()
        grams = [text[i : i + 3] for i in range(max(len(text) - 2, 1))]
        total = 0.0
        for gram in grams:
            total += float(self.weights[zlib.crc32(gram.encode()) % BUCKETS])
        return total / len(grams), len(grams)

    def execute(self, requests):
        # The fixed part: a bias shared by the batch.
        bias = float(np.tanh(self.mix @ self.mix)[0, 0]) * 1e-3
        out = []
        for request in requests:
            texts = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)
            scored = [self._score(t) for t in texts]
            score = np.array([[s + bias] for s, _ in scored], dtype=np.float32)
            grams = np.array([[n] for _, n in scored], dtype=np.int32)
            tensors = [pb_utils.Tensor("SCORE", score), pb_utils.Tensor("TRIGRAMS", grams)]
            out.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return out
