"""Two ranks, 200 steps, nothing kept. Expected: no host-memory lead on either rank, no GPU leak, exit 0."""
from common import train

if __name__ == "__main__":
    train(200)
