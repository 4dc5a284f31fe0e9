"""A longer healthy run: two ranks, 2,400 steps with a short pause each (about 4 minutes), to see whether a slow
warm-up of the input pipeline or the allocator over minutes is mistaken for growth. Expected: no host lead, no GPU
leak, exit 0."""
from common import train

if __name__ == "__main__":
    train(2400, sleep=0.05)
