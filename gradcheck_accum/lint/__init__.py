"""The static half of accumcheck. Nothing under this package may import torch."""
