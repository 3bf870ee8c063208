"""The review screen's decision form: what a reviewer typed, checked field by field so a refusal shows
beside its field with the typed text kept (as New run's form does)."""
from django import forms

from .services import HUMAN_DECISIONS, MAX_RATIONALE_LENGTH


class DecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=[(d, d) for d in HUMAN_DECISIONS],
                                 error_messages={"required": "Choose approve, reject or override.",
                                                 "invalid_choice": "decision must be one of approved, rejected, overridden."})
    # A number as typed; the form says what is wrong with it (not a number, not finite) rather than a 400 page.
    value = forms.FloatField(required=False, error_messages={"invalid": "The new value must be a finite number, e.g. 0 or 0.5."})
    rationale = forms.CharField(required=False, max_length=MAX_RATIONALE_LENGTH, error_messages={
        "max_length": f"A rationale is at most {MAX_RATIONALE_LENGTH:,} characters (this one has %(show_value)d)."})
