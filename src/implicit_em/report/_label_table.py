"""The report's label table: what each experiment's metric keys mean, in words, and in which unit.

The experiments name their metrics for code (``bijection_softmax_kl_per_seed``) or in prose
(``"EM's gain from gd's end, per start (nats/sample)"``); the report shows a reader words and a unit. Three tables,
read in this order by :func:`implicit_em.report._labels.metric_label`:

- ``EXACT``: (experiment, key) -> (label, unit, note) for keys whose meaning composition would not say;
- ``PHRASES``: the words of snake_case keys, shared and per experiment (``kl`` -> "KL", ``d_in_sd`` ->
  "paired change in SDs"), matched longest first; a key is labelled when *every* word of it is in the table;
- ``UNITS``: (regex searched in the key, unit), per experiment then shared; the first match is the unit.

Labels may hold TeX-ish math (``$W_{V}$``), which the report converts like every other text. Units are words a
reader knows: ``bits`` and ``nats`` (information), ``nats/sample``, ``s``, ``count``, ``fraction`` (0-1),
``ratio``, ``relative`` (a difference over the size of what it is compared with), ``eps units`` (machine epsilon
times the scale), ``mean cos²`` (principal angles), ``data std``, ``AUROC``, ``ARI``, ``steps``, ``verdict``.
Wind-tunnel KL and entropy MAE are in bits (``implicit_em.windtunnel.metrics``); training and held-out losses are
cross-entropies in nats.
"""

__all__ = ["EXACT", "PHRASES", "UNITS"]

_WIND_TUNNEL_UNITS: list[tuple[str, str]] = [
    (r"_over_", "ratio"),
    (r"(^|_)(kl|mae)(_|$)", "bits"),
    (r"loss", "nats"),
    (r"(^|_)(seconds|wall_s|train_s)$", "s"),
    (r"params$", "count"),
    (r"steps", "steps"),
    (r"(verdict|outcome|state|states|rule_parts|ops)$|^outcome_", "verdict"),
    (r"op_count$", "count"),
]

UNITS: dict[str, list[tuple[str, str]]] = {
    "*": [
        (r"^(data |replicate )?seeds$", "seed ids"),
        (r"(^|_)(seconds|wall_s|train_s|sticky_wall_s|wall_s_training)$", "s"),
        (r"(verdict|outcome|outcomes|state|states)$", "verdict"),
        (r"(^|_)(n|n_\w+|cases|draws|rows_\w*|components_tested|replicates|epochs|heads_checked|n_runs)$", "count"),
        (r"nats/sample", "nats/sample"),
        (r"\(nats\)", "nats"),
        (r"data std", "data std"),
        (r"eps·max\|d\| units|eps units|\bscaled\b", "eps units"),
        (r"relative (error|miss)|relative to", "relative"),
        (r"\bARI\b", "ARI"),
        (r"share|fraction|rates", "fraction"),
        (r"iterations|epochs", "iterations"),
        (r"verdict", "verdict"),
        (r"log det|log-likelihood", "nats"),
    ],
    "theorem1": [
        (r"^max_residual_float", "absolute"),
        (r"measured sign|sign", "sign (±1)"),
        (r"min absolute", "absolute"),
        (r"rows_per_case", "count"),
    ],
    "gd_vs_em_step": [
        (r"S₁|S₂|\|S₁ − S₂\| / n", "samples"),
        (r"imbalance|sin∠", "ratio"),
        (r"best single η(?! per block)", "learning rate"),
        (r"smallest block step", "learning rate"),
        (r"checked$", "count"),
        (r"ΔmΔmᵀ|identity preconditioner|relative miss|miss", "relative"),
        (r"weight w", "fraction"),
        (r"gap between EM and GD", "absolute"),
    ],
    "same_optimum": [
        (r"‖∇‖", "gradient norm"),
        (r"eigenvalues", "curvature (per θ unit²)"),
        (r"last step", "θ units"),
        (r"relative residual", "relative"),
        (r"evaluations and Newton", "count"),
        (r"^certified ends:", "class"),
        (r"iterations to the certificate", "count"),
        (r"over the same-point bound", "ratio"),
        (r"^the start decides|against EM's", "class"),
        (r"^verdict under", "verdict"),
        (r"held-out", "nats/sample"),
        (r"stopped by", "yes/no"),
        (r"smallest weight", "fraction"),
        (r"passes|epochs run", "passes"),
        (r"K, D, N, starts, passes", "count"),
    ],
    "specialisation": [
        (r"both, gd only|collapsed, starved|starts already|K, N, starts", "count"),
        (r"log-likelihood", "nats/sample"),
    ],
    "volume_collapse": [
        (r"growth of log det|objective without volume|spread over|per replicate", "nats"),
        (r"§3.4 verdicts|§6.2 sentence", "verdict"),
        (r"relative error", "relative"),
    ],
    "attention_law": [
        (r"^(control_)?\w+_(max|min)$", "relative"),
        (r"_uniform_min$|residuals_per_head|referee_reading_rel_residual", "relative"),
        (r"tightness", "ratio"),
        (r"fraction", "fraction"),
        (r"score_gate", "fraction"),
        (r"upstream_norm", "gradient norm"),
        (r"loss", "nats"),
        (r"part_states", "verdict"),
        (r"^(rows_checked|heads_checked)$", "count"),
    ],
    "cross_entropy_regime": [
        (r"law_residual", "absolute"),
        (r"accuracy", "fraction"),
        (r"top_share|wrong_class|attracted", "fraction"),
        (r"n_effective_competitors", "classes"),
    ],
    "bayes_necessity": [
        (r"sum_error|grad_sum|law_residual|hessian_offdiag", "absolute"),
        (r"^n_symbols$", "count"),
        *_WIND_TUNNEL_UNITS,
    ],
    "sticky_sculpting": [
        (r"^d_(mean|sd|se)$|^d_per_run$|old_rule_sigma", "bits"),
        (r"d_in_sd|old_rule_in_sigma", "SDs"),
        (r"gap_closed|target_gap_closed|context_free_ceiling", "fraction"),
        (r"old_rule_passed", "yes/no"),
        (r"^n_(runs|inits|sequences)$", "count"),
        (r"manifold_angle_part", "verdict"),
        *_WIND_TUNNEL_UNITS,
    ],
    "foundations": [
        (r"holds$", "yes/no"),
        (r"per draw|first units", "eps units (per entry)"),
    ],
    "correntropy_robustness": [
        (r"kernel width", "data units"),
        (r"reading|^parts$", "verdict"),
        (r"coverage|duplicate rate|share", "fraction"),
        (r"relative miss|ratio", "relative"),
        (r"gradient norm|gradient mass", "gradient norm"),
    ],
    "open_set": [
        (r"auroc", "AUROC"),
        (r"^tau$|^scales$", "distance"),
        (r"confident_share|flagged|null_share|accuracy|scaled_max_r|scaled_r0", "fraction"),
        (r"^n_", "count"),
    ],
    "mixing_weight_escape": [
        (r"^w0$", "fraction"),
        (r"escape iterations|escape \(median|^cap$", "iterations"),
        (r"EM-equivalent step|best step", "learning rate"),
        (r"ratio|flatness", "ratio"),
        (r"censored", "count"),
        (r"ascends", "yes/no"),
        (r"relative miss|relative to", "relative"),
        (r"max miss", "absolute"),
        (r"angle", "rad"),
        (r"share", "fraction"),
    ],
    "normalisation_as_volume": [
        (r"^per arm$|^mixture objective", "mixed (see entries)"),
        (r"mechanisms", "arms"),
        (r"^steps$", "steps"),
    ],
    "sticky_manifold": [
        (r"_(d_in_sd|z)$", "SDs"),
        (r"(readout|value)(_raw)?_(init|trained|d)_(mean|sd|se)$|(readout|value)(_raw)?_per_run$", "mean cos²"),
        (r"^(chance|chance_raw|aligned_threshold|random_heads_(mean|sd|se)|planted_\w+)$", "mean cos²"),
        (r"(pc1|pc12|share_above_companion)", "fraction"),
        (r"participation_ratio", "components"),
        (r"spearman_abs", "|Spearman ρ|"),
        (r"heldout|loss", "nats"),
        (r"late_share", "fraction"),
        (r"kl_mean", "bits"),
        (r"rule_(outcome|parts)", "verdict"),
        *_WIND_TUNNEL_UNITS,
    ],
    "advantage_ablation": [
        (r"_(pc1|pc12)(_sd|_per_seed)?$", "fraction"),
        (r"participation_ratio", "components"),
        (r"spearman_abs|_rho_per_seed", "|Spearman ρ|"),
        (r"qk_change", "absolute"),
        (r"^check_", "absolute"),
        (r"mae_per_arm", "bits"),
        *_WIND_TUNNEL_UNITS,
    ],
    "two_timescale": [
        (r"_note$", "text"),
        (r"(^|_)(tau|drift_step)(_|$)|planted_tau", "steps"),
        (r"end_spread|_ratio$", "ratio"),
        (r"speed_up", "ratio"),
        (r"mean_se$", "[mean, SE]"),
        (r"censored|tracks$|plateaued$|specific$", "yes/no"),
        (r"minus_bayes_nats", "nats"),
        (r"kl_bits", "bits"),
        (r"planted_errors", "count"),
        *_WIND_TUNNEL_UNITS,
    ],
    "normalisation_necessity": [
        (r"row_sum", "sum of weights"),
        (r"causal_leak", "absolute"),
        (r"plateau_drop", "bits"),
        (r"^(n_symbols|hmm_states|hmm_obs)$", "count"),
        *_WIND_TUNNEL_UNITS,
    ],
}

_SHARED_PHRASES: dict[str, str] = {
    # statistics and bookkeeping
    "mean": "mean", "sd": "SD", "se": "SE", "max": "max", "min": "min", "median": "median", "range": "[min, max]",
    "per_seed": "per seed", "per_run": "per run", "per_head": "per head", "per_arm": "per arm",
    "per_epoch": "per epoch",
    "seconds": "run time", "wall_s": "wall time", "train_s": "training time", "params": "parameters",
    "n": "samples N", "seeds": "seeds", "steps": "training steps", "cases": "cases", "old_rule_verdict":
    "verdict under the previous rule", "old_rule_states": "states under the previous rule", "abs": "|·|",
    "init": "at initialisation", "trained": "after training", "final": "final", "initial": "initial",
    "over": "relative to", "curve": "curve", "kl": "KL(Bayes ‖ model)", "mae": "entropy MAE", "loss": "loss",
    "at_three_quarters": "at ¾ of training", "no_context": "no-context baseline", "bayes": "Bayes-optimal",
    "heldout": "held-out", "train": "training", "first5": "first 5 epochs", "last5": "last 5 epochs",
    "floor": "floor (context-free)", "uniform": "uniform", "control": "control:", "sum": "sum", "error": "error",
    # the wind tunnel's tasks and models
    "bijection": "bijection task:", "hmm": "HMM task:", "sticky": "sticky chain:", "wind_tunnel": "wind tunnel:",
    "softmax": "softmax", "sigmoid": "sigmoid", "prefix_mlp": "prefix MLP",
    "prefix_mlp_sigmoid": "prefix MLP (sigmoid outputs)", "token_mlp": "token MLP (no context)",
    "attn_bce": "attention + BCE", "sigmoid_attn_bce": "sigmoid attention + BCE", "lstm_ce": "LSTM + CE",
    "lstm_bce": "LSTM + BCE", "prefix_mlp_bce": "prefix MLP + BCE",
    # spectral signature of the value manifold
    "pc1": "PC1 share", "pc12": "PC1+PC2 share", "participation_ratio": "participation ratio",
    "spearman_abs": "|Spearman ρ| of PC1 with Bayes entropy", "rho": "|Spearman ρ| of PC1 with Bayes entropy",
    "signature": "value signature:", "replicates": "replicates", "epochs": "epochs", "draws": "draws",
    "outcome": "outcome,",
}  # fmt: skip

PHRASES: dict[str, dict[str, str]] = {
    "*": _SHARED_PHRASES,
    "theorem1": {
        "max_residual_float64": "max |∂L/∂d + r|, float64", "max_residual_float32": "max |∂L/∂d + r|, float32",
        "components_tested": "components K tested", "rows_per_case": "rows per case", "L_minus": "L⁻",
        "max_scaled_residual_float64": "max |∂L/∂d + r|, float64", "max_scaled_residual_float32":
        "max |∂L/∂d + r|, float32",
    },
    "gd_vs_em_step": {"n_xu_jordan": "samples N, Xu–Jordan check"},
    "attention_law": {
        "value_law": "value law $\\partial L/\\partial v$", "w_v_law": "$W_{V}$ law", "routing_law": "routing law",
        "centred": "centred routing law", "key_gated": "key-gated bound", "row_gated": "row-gated bound",
        "w_q_law": "$W_{Q}$ law", "w_k_law": "$W_{K}$ law", "hopfield": "Hopfield read-out law",
        "value_unweighted": "value law, unweighted", "w_v_unweighted": "$W_{V}$ law, unweighted",
        "routing_no_baseline": "routing law without baseline", "centred_no_baseline": "centred law without baseline",
        "key_gated_ungated": "key-gated bound, ungated", "row_gated_ungated": "row-gated bound, ungated",
        "w_q_no_baseline": "$W_{Q}$ law without baseline", "w_k_no_baseline": "$W_{K}$ law without baseline",
        "hopfield_unweighted": "Hopfield law, unweighted", "part_states": "state of each part of the claim",
        "value_uniform": "value law, uniform weights", "w_v_uniform": "$W_{V}$ law, uniform weights",
        "hopfield_uniform": "Hopfield law, uniform weights", "uniform_control_verdict":
        "verdict with uniform-weight controls", "key_gate_tightness": "key gate tightness",
        "row_gate_tightness": "row gate tightness", "residuals_per_head": "residuals per head",
        "rows_checked": "rows checked", "rows_concentrated_fraction": "rows with concentrated attention",
        "score_gate": "score gate", "concentrated": "(concentrated rows)", "diffuse": "(diffuse rows)",
        "upstream_norm": "upstream gradient norm", "referee_reading_rel_residual": "referee's reading: residual",
        "train_loss": "training loss", "no_context_loss": "no-context loss", "bayes_loss": "Bayes-optimal loss",
        "heads_checked": "heads checked",
    },
    "cross_entropy_regime": {
        "law_residual": "|∂ℓ/∂d − (t − r)|", "test_accuracy": "held-out accuracy", "hard": "(hard targets)",
        "smoothed": "(smoothed targets)", "accuracy": "accuracy", "seed0": "seed 0",
        "wrong_class_mass": "wrong-class probability mass", "top_share": "top competitor's share of wrong-class "
        "gradient", "last_epoch": "in the last epoch", "n_effective_competitors": "effective competitors",
        "smoothed_wrong_classes_attracted_last_epoch": "smoothed targets: wrong classes attracted, last epoch",
        "smoothed_wrong_class_mass_last_epoch": "smoothed targets: wrong-class mass, last epoch",
        "smoothed_wrong_class_mass_target": "smoothed targets: wrong-class mass of the target",
    },
    "bayes_necessity": {  # its arms differ at the output only: the attention is softmax in both transformers
        "softmax": "transformer, softmax CE", "sigmoid": "transformer, sigmoid BCE",
        "n_symbols": "symbols", "sum_error": "|Σ attention − 1|", "grad_sum": "Σ of score gradients",
        "law_residual": "law residual", "hessian_offdiag": "max off-diagonal Hessian",
    },
    "sticky_sculpting": {
        "kl_uniform": "KL, uniform prediction", "kl_no_context": "KL, no-context prediction",
        "kl_window_1": "KL, window of 1", "kl_window_2": "KL, window of 2", "kl_window_4": "KL, window of 4",
        "kl_window_8": "KL, window of 8", "kl_positive_control": "KL, positive control", "d": "Δ KL (trained − init)",
        "d_in_sd": "Δ KL in SDs", "gap_closed": "share of the gap closed", "n_runs": "runs",
        "context_free_ceiling": "context-free ceiling", "target_gap_closed": "target share of the gap closed",
        "old_rule_sigma": "previous rule: σ", "old_rule_in_sigma": "previous rule: Δ in σ",
        "old_rule_passed": "previous rule passed", "training_sequence": "on the training sequence",
        "paper_setting": "paper's setting:", "n_inits": "initialisations", "n_sequences": "sequences",
        "manifold_angle_part": "manifold-angle half",
    },
    "open_set": {
        "confident_share": "share confident (max r ≥ threshold)", "ood": "on OOD inputs", "auroc_gain":
        "AUROC gain over 1 − max r", "null": "null component r₀", "softmin": "soft-min distance",
        "min_d": "min distance", "accuracy_gap": "accuracy gap (open − closed)", "flagged": "share flagged",
        "known": "known classes", "unseen": "unseen classes", "marginal": "marginal noise", "noise": "noise",
        "auroc": "AUROC", "msp": "max softmax", "open": "(open-set model)", "random": "random score",
        "accuracy_closed": "accuracy, closed-set model", "accuracy_open": "accuracy, open-set model",
        "null_share": "null share", "train_null_share": "training null share", "tau": "null distance τ",
        "null_minus_softmin": "null − soft-min", "null_sd": "null SD", "scales": "logit scales",
        "scaled_max_r_median": "median max r after scaling", "scaled_r0_median": "median r₀ after scaling",
        "n_known_test": "known test points", "n_ood": "OOD test points",
    },
    "sticky_manifold": {
        "chance": "random subspace (chance)", "chance_raw": "random subspace, raw read-out (chance)",
        "aligned_threshold": "aligned threshold", "n_runs": "runs", "sgd": "SGD arm:", "adam": "Adam arm:",
        "shuffled": "shuffled-labels arm:", "readout": "read-out alignment", "value": "value-PC alignment",
        "raw": "(raw)", "d": "paired change", "d_in_sd": "paired change in SDs",
        "share_above_companion": "share above the companion's", "vs": "vs", "planted_in": "planted head in the span:",
        "planted_out": "planted head orthogonal:", "random_heads": "random heads:", "z": "z-score",
        "heldout_init": "held-out loss at init", "heldout_final": "held-out loss, final", "heldout_mid":
        "held-out loss half way", "heldout_gain": "held-out loss gain", "late_share": "share of the gain in its second "
        "half", "train_loss_initial": "training loss, initial", "train_loss_final": "training loss, final",
        "bayes_heldout_loss": "Bayes-optimal held-out loss", "no_context_heldout_loss": "no-context held-out loss",
        "rule_outcome": "rule outcome", "rule_parts": "rule parts", "heldout_curve": "held-out loss curve",
        "kl": "KL(Bayes ‖ model)",
    },
    "advantage_ablation": {
        "A": "arm A", "B": "arm B", "C": "arm C", "D": "arm D", "over_A": "relative to arm A",
        "qk_change": "max change of $W_{Q}$, $W_{K}$", "outcome": "outcome", "check_exact_vs_autograd":
        "check: exact advantage vs autograd", "check_no_baseline_minus_exact": "check: no-baseline minus exact",
        "check_zero": "check: zero advantage", "check_permuted_vs_exact": "check: permuted vs exact",
        "final_loss": "final loss", "mae_per_arm": "entropy MAE per arm",
    },
    "correntropy_robustness": {"parts": "parts of the claim"},
    "foundations": {"label_smoothing": "label smoothing"},
    "mixing_weight_escape": {"w0": "initial weight $w_{0}$ of the small component", "cap": "iteration cap"},
    "normalisation_as_volume": {"steps": "training steps"},
    "two_timescale": {
        "planted_tau_fast": "planted control: τ of the fast path (two noise draws)",
        "planted_tau_slow": "planted control: τ of the slow path (two noise draws)",
        "planted_errors": "planted controls: errors", "wind_tunnel": "wind tunnel:", "sticky": "sticky testbed:",
        "sticky_one_head": "one-head sticky head (companion's, reported):", "sgd": "SGD,", "adam": "Adam,",
        "note": "setting", "tau": "τ (90% of the displacement) of", "twin_tau": "data-order twin: τ of",
        "old_tau": "old τ (5% of the final value) of", "censored": "censored (at or after the drift step):",
        "end_spread": "twins' end-point distance / displacement of", "drift_step": "drift step (censoring line)",
        "W_V": "$W_{V}$", "W_QK": "$W_{Q}W_{K}$", "A": "attention A", "V": "values V", "outcomes": "outcomes",
        "baseline_kl_bits": "baseline: held-out KL(Bayes ‖ model)", "twin_kl_bits": "data-order twin: held-out KL",
        "half_kl_bits": "half-budget twin: held-out KL",
        "no_context_kl_bits": "no-context KL(Bayes ‖ $p(y_{t} | x_{t})$)",
        "track_ratio": "baseline KL / no-context KL", "plateau_gap_ratio": "(half-budget KL − KL) / no-context KL",
        "train_minus_bayes_nats": "baseline: training loss − Bayes", "arm_kl_bits": "per arm: held-out KL",
        "speed_up": "speed-up per arm and seed", "speed_up_mean": "speed-up per arm (mean over seeds)",
        "reach_censored": "never reached the target, per arm", "specific": "W_V-specific, per multiplier",
        "gain_mean_se": "speed-up(W_V) − 1, per multiplier", "vs_W_O_mean_se": "speed-up(W_V) − speed-up(W_O)",
        "vs_W_QK_mean_se": "speed-up(W_V) − speed-up(W_Q/W_K)", "state": "ordering state", "tracks": "tracks",
        "plateaued": "plateaued", "wall_s": "wall time",
    },
    "normalisation_necessity": {
        "softmax": "transformer, softmax CE",
        "n_symbols": "symbols", "hmm_states": "HMM hidden states", "hmm_obs": "HMM observations",
        "attention_row_sum": "attention row sum", "emission_only": "emission-only", "plateau_drop": "plateau drop",
        "softmax_op_count": "softmax ops in the graph", "softmax_ops": "softmax ops in the graph",
        "causal_leak_per_arm": "causal leak per arm", "causal_leak_max": "causal leak, max",
    },
}  # fmt: skip

EXACT: dict[tuple[str, str], tuple[str, str, str]] = {
    ("theorem1", "max_residual_float64"): ("max |∂L/∂d + r|, float64", "absolute", ""),
    ("theorem1", "max_residual_float32"): ("max |∂L/∂d + r|, float32", "absolute", ""),
    ("theorem1", "printed sign in §4.1"): ("sign of ∂L⁻/∂d printed in §4.1", "sign (±1)", ""),
    ("gd_vs_em_step", "n"): ("samples N", "count", ""),
    ("attention_law", "seconds"): ("run time", "s", ""),
    ("attention_law", "part_states"): ("state of each part of the claim", "verdict", ""),
    ("sticky_sculpting", "d_sd"): ("SD of Δ KL over runs", "bits", ""),
    ("sticky_sculpting", "d_se"): ("SE of Δ KL", "bits", ""),
    ("sticky_sculpting", "d_mean"): ("mean Δ KL (trained − init)", "bits", ""),
    ("open_set", "tau"): ("null distance τ", "distance", "the null component's learned distance"),
    ("open_set", "auroc_random_null_sd"): ("SD of AUROC for a random score", "AUROC", ""),
}
