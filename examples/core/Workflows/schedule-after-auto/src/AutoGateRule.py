"""Rule of `auto-advance`, re-authored from the upstream .csx: true only for mode "auto" (a
missing mode counts as "park")."""


def handler(context):
    mode = get(context.instance.data, "mode") or "park"
    return mode == "auto"
