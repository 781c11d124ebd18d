"""Gaussian mixtures fitted three ways: batch EM, online EM, gradient descent (implicit EM)."""

from implicit_em.mixture._gaussian_mixture import GaussianMixture

__all__ = ["GaussianMixture"]
