"""The learned cost model: predicts a candidate's log2 run time from its features.

scikit-learn's ``HistGradientBoostingRegressor`` on ``log2(seconds)``, refit on every measurement
so far after each round (fits in milliseconds for hundreds of samples). Used only to *rank*
proposals, so its scale does not matter. Untrained (fewer than ``min_samples`` measurements) it
abstains and the tuner measures random picks. scikit-learn is imported at the first fit: its
import takes seconds, and a short tuning run never trains. See also: TVM's XGBoost cost model
(Chen et al., NeurIPS 2018 "Learning to Optimize Tensor Programs"), Ansor (OSDI 2020), Adams et
al. 2019."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .features import FEATURE_NAMES

if TYPE_CHECKING:
    from sklearn.ensemble import HistGradientBoostingRegressor


class CostModel:
    """Gradient-boosted trees on (features -> log2 seconds)."""

    def __init__(self, seed: int = 0, min_samples: int = 6) -> None:
        self.seed = seed
        self.min_samples = min_samples
        self._x: list[np.ndarray] = []
        self._y: list[float] = []
        self._model: HistGradientBoostingRegressor | None = None

    @property
    def trained(self) -> bool:
        return self._model is not None

    def add(self, features: np.ndarray, seconds: float) -> None:
        """Record one measurement (failed candidates are not recorded). A shorter vector (a
        record of an older feature set: features are only appended) is padded with NaN, which
        the trees treat as missing; a longer one (a newer version's) is cut to this version's."""
        if np.isfinite(seconds) and seconds > 0:
            x = np.full(len(FEATURE_NAMES), np.nan)
            v = np.asarray(features, dtype=np.float64)[: len(FEATURE_NAMES)]
            x[: len(v)] = v
            self._x.append(x)
            self._y.append(float(np.log2(seconds)))

    def fit(self) -> None:
        """Refit on every measurement so far (no-op below ``min_samples``)."""
        if len(self._y) < self.min_samples:
            return
        from sklearn.ensemble import HistGradientBoostingRegressor

        x = np.stack(self._x)
        # a feature no sample has (every record predates it: a warm start from older logs) is
        # constant 0 for the fit -- the trees ignore it -- since scikit-learn cannot bin an
        # all-missing column ("window shape cannot be larger than input array shape")
        x[:, np.isnan(x).all(axis=0)] = 0.0
        model = HistGradientBoostingRegressor(max_iter=100, learning_rate=0.1,
                                              min_samples_leaf=2, random_state=self.seed)
        model.fit(x, np.array(self._y))
        self._model = model

    def predict(self, features: np.ndarray) -> np.ndarray | None:
        """Predicted log2 seconds per row of ``features``, or None while untrained."""
        if self._model is None:
            return None
        return self._model.predict(np.atleast_2d(features))
