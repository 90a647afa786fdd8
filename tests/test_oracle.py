"""Independent oracle: PyTorch's own post-LN Transformer layers, with our weights copied in, give our hidden states."""

import torch
from torch import nn

from tiny import padded_batch, tiny_model


def _copy_attention(ours, theirs: nn.MultiheadAttention) -> None:
    theirs.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
    theirs.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
    theirs.out_proj.weight.copy_(ours.out_proj.weight)
    theirs.out_proj.bias.copy_(ours.out_proj.bias)


def _copy_feed_forward(ours, theirs) -> None:
    theirs.linear1.load_state_dict(ours.feed_forward.fc1.state_dict())
    theirs.linear2.load_state_dict(ours.feed_forward.fc2.state_dict())


def _torch_layer(kind, config):
    return kind(
        config.d_model,
        config.encoder_attention_heads,
        dim_feedforward=config.encoder_ffn_dim,
        dropout=0.0,
        activation="relu",
        batch_first=True,
        norm_first=False,
    ).eval()


def test_encoder_and_decoder_match_torch_nn_transformer_layers():
    model = tiny_model(std=0.2)
    config = model.config
    ids, mask = padded_batch()
    decoder_ids = torch.randint(4, 64, (3, 7), generator=torch.Generator().manual_seed(7))

    encoder_layers, decoder_layers = [], []
    with torch.no_grad():
        for ours in model.model.encoder.layers:
            theirs = _torch_layer(nn.TransformerEncoderLayer, config)
            _copy_attention(ours.self_attn, theirs.self_attn)
            _copy_feed_forward(ours, theirs)
            theirs.norm1.load_state_dict(ours.self_attn_norm.state_dict())
            theirs.norm2.load_state_dict(ours.feed_forward_norm.state_dict())
            encoder_layers.append(theirs)
        for ours in model.model.decoder.layers:
            theirs = _torch_layer(nn.TransformerDecoderLayer, config)
            _copy_attention(ours.self_attn, theirs.self_attn)
            _copy_attention(ours.cross_attn, theirs.multihead_attn)
            _copy_feed_forward(ours, theirs)
            theirs.norm1.load_state_dict(ours.self_attn_norm.state_dict())
            theirs.norm2.load_state_dict(ours.cross_attn_norm.state_dict())
            theirs.norm3.load_state_dict(ours.feed_forward_norm.state_dict())
            decoder_layers.append(theirs)

        padding = mask == 0
        memory = model.model.encoder.embed(ids, None, past_length=0, name="input_ids")
        for layer in encoder_layers:
            memory = layer(memory, src_key_padding_mask=padding)
        target = model.model.decoder.embed(decoder_ids, None, past_length=0, name="decoder_input_ids")
        causal = nn.Transformer.generate_square_subsequent_mask(decoder_ids.shape[1])
        for layer in decoder_layers:
            target = layer(target, memory, tgt_mask=causal, tgt_is_causal=True, memory_key_padding_mask=padding)

        ours = model.model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids)

    keep = mask.bool()
    assert torch.allclose(ours.encoder_last_hidden_state[keep], memory[keep], atol=1e-5)
    assert torch.allclose(ours.last_hidden_state, target, atol=1e-5)
