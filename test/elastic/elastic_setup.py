"""What elastic_train.py trains and reference.py replays: the data and the
hyperparameters, chosen so that every update is exact in float64 (integer
samples, a learning rate and momentum that are powers of two, sizes 2 and 4)."""
SAMPLES, FEATURES = 64, 8
BATCH = 2  # per rank
EPOCHS = 2
COMMIT_EVERY = 2  # steps
LR, MOMENTUM = 1 / 8, 1 / 2
SEED = 7  # ElasticSampler's


def features(i):
    """Sample i: small integers, different for every sample."""
    return [((i * 31 + j * 17) % 13) - 6 for j in range(FEATURES)]
