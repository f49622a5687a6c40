"""Recurrent layers (LSTM, GRU, Elman tanh / ReLU) on cuDNN's v8 RNN API.

- :mod:`.plan`: the :class:`RNN` plan and the :class:`RNNState` a training forward leaves;
- :mod:`.descriptors`: its descriptors (dropout, RNN, the data of one batch shape);
- :mod:`.weights`: the weight space's views in PyTorch's names and order.
"""

from .descriptors import RNN_ALGOS, DropoutDescriptor, RNNDataDescriptor, RNNDescriptor, RNNState
from .plan import RNN, RNN_DATA_KEY
from .weights import RNNSpec, RNNWeights, rnn_spec

__all__ = ["RNN", "RNNState", "RNNWeights", "RNNSpec", "rnn_spec", "RNNDescriptor",
           "RNNDataDescriptor", "DropoutDescriptor", "RNN_ALGOS", "RNN_DATA_KEY"]
