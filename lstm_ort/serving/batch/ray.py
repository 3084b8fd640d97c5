"""Ray Data: the bucketing batcher on every actor of a cluster (docs/serving.md).

``LstmOrtPredictor`` is a stateful callable for ``Dataset.map_batches``: each actor loads the
session once, and every block it gets is bucketed by length and run by a BucketingBatcher. It
takes and returns pyarrow tables (``batch_format="pyarrow"``): the sequence column in, one list
column per model output added (lstm_ort.serving.batch.arrow's layout), named as ``lstm-ort batch`` names
them (``Y``, or ``Y_out`` where the block has a column ``Y`` already). ``predict`` wires it up.
This is the only module of lstm_ort that imports Ray.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import ray  # noqa: F401  (an error here says: pip install 'lstm-ort[serving]')

from lstm_ort.runtime.library import LIBRARY_ENV, get_library_path
from lstm_ort.serving.batch.arrow import add_output_columns
from lstm_ort.serving.batch.batcher import BucketingBatcher


class LstmOrtPredictor:
    def __init__(self, model, column: str, *, output_names: list[str] | None = None, output_prefix: str = "",
                 input_name: str | None = None, extra_inputs: dict | None = None, library: str | None = None,
                 **batcher_kwargs: Any):
        # A worker may import lstm_ort from another place than the driver did (a local cluster's
        # workers start in the driver's directory, where a source tree without its built library
        # can shadow the install): use the driver's library where this node has that file.
        if library and Path(library).is_file() and not os.environ.get(LIBRARY_ENV):
            os.environ[LIBRARY_ENV] = library
        self.batcher = BucketingBatcher(model, input_name=input_name, **batcher_kwargs)
        self.layout = self.batcher.layout(input_name)
        self.column, self.prefix, self.extra, self.input_name = column, output_prefix, extra_inputs, input_name
        self.outputs = list(output_names) if output_names else [o.name for o in self.batcher.session.get_outputs()]
        self.stats = []  # one BatchStats per block this actor ran

    def __call__(self, table):
        results = self.batcher.run(table.column(self.column), input_name=self.input_name,
                                   extra_inputs=self.extra, output_names=self.outputs)
        self.stats.append(self.batcher.stats)
        return add_output_columns(table, results, self.outputs, self.layout, self.prefix)


def predict(ds, model, column: str, *, num_gpus: float | None = None, num_cpus: float | None = None,
            concurrency: int = 1,
            batch_size: int | str | None = "default", output_names: list[str] | None = None,
            output_prefix: str = "", input_name: str | None = None, **batcher_kwargs: Any):
    """``ds`` with the model's outputs added as columns. ``model``: a path every node can read
    (or a ModelProto, shipped to each actor). ``concurrency``: actors; ``num_gpus``: per actor
    (pass ``providers=["cuda", "cpu"]`` with it), ``num_cpus``: per actor; ``batch_size``: rows per block handed to an
    actor, which buckets them. Other keywords go to BucketingBatcher."""
    kwargs = dict(fn_constructor_kwargs=dict(model=model, column=column, output_names=output_names,
                                             output_prefix=output_prefix, input_name=input_name,
                                             library=get_library_path(), **batcher_kwargs),
                  batch_format="pyarrow", concurrency=concurrency, zero_copy_batch=True)
    if batch_size != "default":
        kwargs["batch_size"] = batch_size
    if num_gpus:
        kwargs["num_gpus"] = num_gpus
    if num_cpus is not None:  # per actor; leave CPUs for Ray Data's read tasks on small clusters
        kwargs["num_cpus"] = num_cpus
    return ds.map_batches(LstmOrtPredictor, **kwargs)
