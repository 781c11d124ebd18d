"""A distance-based classifier: one learnable prototype per class in a linear embedding (the constrained regime's
model, read by ``cross_entropy_regime`` and ``open_set``)."""

from torch import Tensor, nn

from implicit_em.distances import Prototypes

__all__ = ["DistanceClassifier"]


class DistanceClassifier(nn.Module):
    """x (N, 64) -> distances d (N, K) to one learnable prototype per class in a linear embedding."""

    def __init__(self, n_features: int, n_classes: int, embed_dim: int) -> None:
        super().__init__()
        self.embed = nn.Linear(n_features, embed_dim)
        self.prototypes = Prototypes(n_classes, embed_dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.prototypes(self.embed(x))  # (N, K)
