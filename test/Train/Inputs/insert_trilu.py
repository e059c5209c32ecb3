#!/usr/bin/python3
"""Insert a Trilu (lower, diagonal k) on the output of one node of an ONNX
model, before every op that read it; the model keeps its external data file
(write the result next to it).

A Trilu of [b, s, h] keeps element (i, j) of each sample when j <= i + k: it
depends on a row's position in the sequence, and ds has no sharding rule for
it, so under --sequence-parallel it must see the whole sequence.

  insert_trilu.py IN.onnx TENSOR K OUT.onnx
"""
import sys

import onnx
from onnx import TensorProto, helper


def main() -> int:
    src, tensor, k, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    model = onnx.load(src, load_external_data=False)
    graph = model.graph
    masked = tensor + "/trilu"
    for node in graph.node:
        node.input[:] = [masked if i == tensor else i for i in node.input]
    producer = next(i for i, n in enumerate(graph.node) if tensor in n.output)
    graph.initializer.append(helper.make_tensor(tensor + "/trilu_k", TensorProto.INT64, [], [k]))
    graph.node.insert(producer + 1, helper.make_node(
        "Trilu", [tensor, tensor + "/trilu_k"], [masked], name=tensor + "/Trilu", upper=0))
    onnx.save(model, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
