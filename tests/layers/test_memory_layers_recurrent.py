"""Memory rules of the recurrent family (caffemem/layers/recurrent.py), in bytes derived by
hand from Caffe master's CPU code (float32: 4 bytes an element, a shape buffer 4 bytes an
axis).  The lrcn ground truth checks LSTM on real nets (tests/test_groundtruth_memory.py);
these nets are small enough to follow the unrolled net layer by layer.

LSTM nets here: x (1,1,2), cont (1,1), num_output 1, so T = N = H = 1, 4 gates.  Its
unrolled net (lstm_layer.cpp FillUnrolledNet, recurrent_layer.cpp LayerSetUp), SetUp bytes:
  Input x (1,1,2), cont (1,1)                      12 + 8
  Input c_0, h_0 (1,1,1)                           12 + 12
  Slice cont_slice -> cont_1 (one top: shares)     8, and a Split of cont_1 (2 readers) 8 + 8
  InnerProduct x_transform: W_xc (4,2) 8 + 32, b_c (4) 4 + 16, bias_multiplier (1) 4 + 4, top (1,1,4) 12
  Slice W_xc_x_slice -> W_xc_x_1 (one top)         12
  Scale h_conted_0 (axis 0, scale = cont_1): top 12, sum_result_ (1) 4, sum_multiplier_ (1) 4 + 4
  InnerProduct transform_1: W_hc (4,1) 8 + 16, top 12
  Eltwise gate_input_1: top 12
  LSTMUnit unit_1: c_1, h_1 12 + 12, X_acts_ (1,1,4) 12
  Split c_1 -> c_T: 12;  Concat h_concat (one bottom: shares): 12
  Reduction h_pseudoloss: top () 0, sum_multiplier_ (1) 4 + 4, loss_weight diff 4
= 304; then LayerSetUp writes the diffs of h_1 and c_T (4 + 4), and the LSTM's top (1,1,1)
takes 12: 324.
"""

from __future__ import annotations

LSTM_INPUTS = {"x": (1, 1, 2), "cont": (1, 1)}
LSTM = 'layer {{ name: "lstm" type: "LSTM" bottom: "x" bottom: "cont" top: "h" recurrent_param {{ num_output: 1 }} }}\n{}'
LOSS = 'layer { name: "loss" type: "Reduction" bottom: "h" top: "loss" loss_weight: 1 }'
RNN = 'layer {{ name: "rnn" type: "RNN" bottom: "x" bottom: "cont" {} top: "o" {} recurrent_param {{ num_output: 1 {} }} }}'


def _bytes(layer) -> tuple[int, int, int]:
    return layer.init, layer.fwd_alloc, layer.bwd_alloc


def test_lstm_setup_is_its_unrolled_net(memory_of):
    # recurrent_layer.cpp LayerSetUp: every byte of the unrolled Net's Init (see above).
    layer = memory_of(LSTM.format(""), LSTM_INPUTS, phase="TEST")["lstm"]
    assert layer.init == 324


def test_lstm_forward_copies_the_last_state_into_the_first(memory_of):
    # recurrent_layer.cpp Forward_cpu: copies h_1 (read: 4) into h_0 (4) and c_T into c_0
    # (4 + 4), then the unrolled ForwardTo: W_xc_x 16, h_conted_0 4, W_hc_h_0 16,
    # gate_input_1 16, c_1 4 (h_1 already there); the Split points c_T at c_1, whose own
    # data is freed (-4); the Concat shares.  16 + 52.
    layer = memory_of(LSTM.format(""), LSTM_INPUTS, phase="TEST")["lstm"]
    assert layer.fwd_alloc == 68


def test_lstm_backward_writes_the_input_diff_without_propagate_down(memory_of):
    # recurrent_layer.cpp Backward_cpu: the unrolled BackwardFrom, whatever propagate_down
    # says (here False for x: an Input).  unit_1: c_1's diff 4 (h_1's was written at SetUp),
    # c_0's 4, gate_input_1's 16; gate_input_1: W_hc_h_0's 16, W_xc_x's 16 (the one-top
    # slice shares it); transform_1: W_hc's 16; x_transform: W_xc's 32, b_c's 16, and x's 8
    # (inner x shares the outer bottom's diff; its propagate_down is forced true).
    layers = memory_of(LSTM.format(LOSS), LSTM_INPUTS, force_backward=False)
    assert layers["lstm"].propagate_down == (False, False)
    assert layers["lstm"].bwd_alloc == 24 + 32 + 16 + 56
    assert layers["lstm"].by_category["activation_gradients"] == 8  # x's diff


def test_lstm_parameters_are_the_unrolled_owners(memory_report):
    # recurrent_layer.cpp LayerSetUp: blobs_ are the unrolled params with owner -1: W_xc, b_c,
    # W_hc (transform_1); transform_2's W_hc is filled, then ShareWeights frees it (its
    # shape, 8, stays).  Parameter bytes: shapes 8 + 4 + 8, data 32 + 16 + 16.
    report = memory_report(LSTM.format(""), {"x": (2, 1, 2), "cont": (2, 1)}, phase="TEST", force_backward=False)  # Forward only: no diff of its own
    lstm = next(layer for layer in report.layers if layer.name == "lstm")
    assert report.learnable_param_bytes == 64
    assert lstm.by_category["parameters"] == 84
    assert [b for name, b in lstm.buffers.items() if name.endswith("lstm_transform_2#0")] == [8]


def test_lstm_top_is_the_unrolled_output(memory_of):
    # recurrent_layer.cpp Reshape: top ShareData/ShareDiff(h): a ReLU after the LSTM reads
    # data the unrolled net made (0 new) and writes its own top (4).
    body = LSTM.format('layer { name: "r" type: "ReLU" bottom: "h" top: "r" }')
    assert memory_of(body, LSTM_INPUTS, phase="TEST")["r"].fwd_alloc == 4


def test_rnn_setup_is_its_unrolled_net(memory_of):
    # rnn_layer.cpp FillUnrolledNet, x (1,1,1), H = 1: Input x, cont 12 + 8; Input h_0 12;
    # cont_slice 8 (cont_1 has one reader: no Split); x_transform W_xh 8 + 4, b_h 4 + 4,
    # bias_multiplier 4 + 4, top 12; W_xh_x_slice 12; h_conted_0 12 + 4 + 8; W_hh_h_0
    # 8 + 4 + 12; h_input_sum_1 12; h_neuron_1 12; W_ho_h_1 8 + 4 + 4 + 4 + 8 + 12;
    # o_neuron_1 12; o_concat 12; o_pseudoloss 8 + 4 = 240; h_1's diff 4; top 12.
    layer = memory_of(RNN.format("", "", ""), {"x": (1, 1, 1), "cont": (1, 1)}, phase="TEST")["rnn"]
    assert layer.init == 256


def test_rnn_forward(memory_of):
    # Copy h_1 (4) into h_0 (4); x_transform, h_conted_0, W_hh_h_0, h_input_sum_1,
    # W_ho_h_1, o_neuron_1 tops 4 each (h_1 already there).
    layer = memory_of(RNN.format("", "", ""), {"x": (1, 1, 1), "cont": (1, 1)}, phase="TEST")["rnn"]
    assert layer.fwd_alloc == 8 + 24


def test_exposed_hidden_state_is_shared_not_copied(memory_of):
    # recurrent_layer.cpp: with expose_hidden, Reshape shares h_0's data with bottom 2 and
    # Forward neither copies nor allocates h_0; h_1 is first written by h_neuron_1 (4), and
    # the second top is pointed at it (ShareData).  24 + 4.
    body = RNN.format('bottom: "h0"', 'top: "hT"', "expose_hidden: true")
    layer = memory_of(body, {"x": (1, 1, 1), "cont": (1, 1), "h0": (1, 1, 1)}, phase="TEST")["rnn"]
    assert layer.fwd_alloc == 28


def test_lstm_unit(memory_of):
    # lstm_unit_layer.cpp: Reshape c_t, h_t like c_prev (1,2,3) 12 + 12, X_acts_ like the gates
    # 12.  Forward writes c_t, h_t (24 + 24).  Backward (propagate_down 0 and 1; never to
    # cont): both top diffs (24 + 24, no consumer wrote them), c_prev's 24 and the gates' 96.
    body = 'layer { name: "u" type: "LSTMUnit" bottom: "c" bottom: "g" bottom: "cont" top: "ct" top: "ht" }'
    layer = memory_of(body, {"c": (1, 2, 3), "g": (1, 2, 12), "cont": (1, 2)})["u"]
    assert layer.propagate_down == (True, True, False)
    assert _bytes(layer) == (36, 48, 168)
