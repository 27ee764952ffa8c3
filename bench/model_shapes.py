"""Gradient sets that several benchmarks lay out (imported by bench scripts that run
under different interpreters, so it needs nothing but Python)."""


def bert_base_shapes(layers=12, hidden=768, ffn=3072, vocab=30522, positions=512):
    """BERT-base's parameter shapes, in model order (199 tensors, 110 M parameters)."""
    shapes = [(vocab, hidden), (positions, hidden), (2, hidden), (hidden,), (hidden,)]
    for _ in range(layers):
        for _ in range(4):  # query, key, value, attention output
            shapes += [(hidden, hidden), (hidden,)]
        shapes += [(hidden,), (hidden,)]  # attention LayerNorm
        shapes += [(ffn, hidden), (ffn,), (hidden, ffn), (hidden,)]
        shapes += [(hidden,), (hidden,)]  # output LayerNorm
    shapes += [(hidden, hidden), (hidden,)]  # pooler
    return shapes
