from django import forms

from .models import EnvironmentKind


class EnvironmentForm(forms.Form):
    name = forms.CharField(max_length=120)
    slug = forms.SlugField(max_length=80, required=False, help_text="Leave empty to derive it from the name.")
    kind = forms.ChoiceField(choices=EnvironmentKind.choices, initial=EnvironmentKind.PYTHON)
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)


class UploadForm(forms.Form):
    file = forms.FileField(help_text="A .zip or .tar.gz of an environment folder (20 MB at most).")
    source = forms.ChoiceField(choices=[("package", "a studio package"), ("harbor", "Harbor task folders")],
                               initial="package", required=False, label="Archive of")
    message = forms.CharField(max_length=500, required=False)
