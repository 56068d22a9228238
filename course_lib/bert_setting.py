"""Lesson 07's saved BERT setting, as lessons 11 and 12 read it (from lesson 07's result in the same profile)."""


def saved_setting(saved07: dict | None, profile: str, plan) -> dict:
    """What lessons 11 and 12 take from lesson 07's run in this ``profile`` (its BERT, target, small-batch runs),
    else the tier plan's BERT, no target."""
    ok = bool(saved07 and saved07.get("profile") == profile)
    runs = saved07.get("runs", []) if ok else []
    # the small-batch Adam baseline ("adam b=32"): how many steps it took to reach the target
    base = next((r for r in runs if r.get("label", "").startswith("adam b=") and "(" not in r["label"]), None)
    lamb = next((r for r in runs if base and r.get("label") == f"lamb b={base.get('global_batch_size')}"), None)
    return {"model": saved07["model"] if ok else plan.bert_model,
            "seq_len": saved07.get("seq_len", plan.bert_seq_len) if ok else plan.bert_seq_len,
            "vocab_size": plan.bert_vocab_size, "target_loss": saved07.get("target_loss") if ok else None,
            "source": f"lesson 07's {profile} run" if ok else  # a lesson run alone says where its setting came from
            f"the tier plan's BERT, with no target loss: lesson 07 has not saved a {profile}-profile run here",
            "target_steps": None if base is None else base.get("steps_to_loss"),
            "target_batch": None if base is None else base.get("global_batch_size"),
            # the small-batch LAMB run (lesson 12 searches LAMB): where it stood at a trial's last step
            "lamb_steps": None if lamb is None else lamb.get("steps_to_loss"),
            "lamb_curve": None if lamb is None else [list(p) for p in lamb.get("eval_loss_curve", [])],
            "lamb_lr": None if lamb is None else lamb.get("peak_lr")}

