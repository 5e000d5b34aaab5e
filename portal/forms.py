"""Forms of the web pages."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from django import forms
from django.utils.text import format_lazy
from django.utils.translation import gettext, gettext_lazy

from fleet.choices import Policy, TrainingMode
from fleet.models import ChipType, Dataset, UploadedModel
from kernel.modelspecs import CATALOG, resolve_model
from kernel.money import format_amount, format_price
from kernel.spec import JobSpec
from market.services.hints import default_bid
from portal.models.tokens import DEFAULT_EXPIRY_DAYS, MAX_EXPIRY_DAYS, TokenScope
from workers.api.job_spec import JobSpecSerializer


class ApiTokenForm(forms.Form):
    """Name, scope and optional lifetime of a new API token."""

    name = forms.CharField(label=gettext_lazy("Name"), max_length=80, initial="API token", strip=True)
    scope = forms.ChoiceField(label=gettext_lazy("Scope"), choices=TokenScope.choices, initial=TokenScope.READ_WRITE)
    expires_in_days = forms.IntegerField(
        label=gettext_lazy("Expires in (days)"),
        required=False,
        initial=DEFAULT_EXPIRY_DAYS,
        min_value=1,
        max_value=MAX_EXPIRY_DAYS,
        help_text=format_lazy(
            gettext_lazy("1–{most}, {default} unless you change it; empty for a token that never expires."),
            most=MAX_EXPIRY_DAYS,
            default=DEFAULT_EXPIRY_DAYS,
        ),
    )

    def expires_at(self, now: datetime) -> datetime | None:
        days = self.cleaned_data.get("expires_in_days")
        return now + timedelta(days=days) if days else None


class SpecField(forms.CharField):
    """A field of the launch form: rendered by Django, validated by JobSpecSerializer (as in the API)."""

    def __init__(self, *, widget=None, **kwargs) -> None:
        super().__init__(required=False, widget=widget, **kwargs)


class TrainingForm(forms.Form):
    """The launch page's job spec; its rules are JobSpecSerializer's, so the page and the API agree."""

    model = SpecField(
        label=gettext_lazy("Model"),
        initial="llama-tiny",
        widget=forms.Select,
        help_text=gettext_lazy(
            "Catalog models are Hugging Face configs trained from scratch (llama-tiny trains on a CPU in "
            "seconds); yours start from the weights you uploaded."
        ),
    )
    dataset = SpecField(label=gettext_lazy("Dataset"), initial="synthetic", widget=forms.Select)
    mode = SpecField(
        label=gettext_lazy("Training"),
        initial=TrainingMode.FULL,
        widget=forms.Select(choices=TrainingMode.choices),
        help_text=gettext_lazy(
            "Full: every weight trains. LoRA: a small adapter on the frozen model (far less memory)."
        ),
    )
    eval_dataset = SpecField(
        label=gettext_lazy("Held-out data (optional)"),
        widget=forms.Select,
        help_text=gettext_lazy("The loss on data the model never trains on, measured every N steps and at the end."),
    )
    eval_every = SpecField(
        label=gettext_lazy("Eval every N steps"), initial="0", widget=forms.NumberInput(attrs={"min": "0"})
    )
    policy = SpecField(
        label=gettext_lazy("Policy"),
        initial=Policy.COST_PERFORMANCE,
        widget=forms.Select(choices=Policy.choices),
        help_text=gettext_lazy(
            "Cost-performance: lowest ¥ per token × seconds per token; fastest: most tokens/s within the budget; "
            "cheapest: lowest ¥ per token; single chip type: cost-performance on one type. The quote compares them."
        ),
    )
    max_budget = SpecField(
        label=gettext_lazy("Hourly budget (¥)"),
        initial="28",
        widget=forms.NumberInput(attrs={"min": "0", "step": "0.01"}),
    )
    max_steps = SpecField(label=gettext_lazy("Max steps"), initial="200", widget=forms.NumberInput(attrs={"min": "1"}))
    per_device_batch_size = SpecField(
        label=gettext_lazy("Per-device batch"),
        initial="4",
        widget=forms.NumberInput(attrs={"min": "1"}),
        help_text=gettext_lazy("Samples per chip per step on average; faster chips get more."),
    )
    name = SpecField(
        label=gettext_lazy("Name (optional)"),
        widget=forms.TextInput(attrs={"maxlength": "120", "placeholder": gettext_lazy("my first run")}),
    )
    # Spot: the bid and the two fallbacks reach the spec only when the box is ticked, so an on-demand
    # job keeps the API's defaults.
    spot = forms.BooleanField(
        label=gettext_lazy("Spot"),
        required=False,
        help_text=gettext_lazy(
            "Run on spare chips at the auction's clearing price: cheaper, but they can be reclaimed "
            "with notice; the job then checkpoints and moves, and lost work is refunded."
        ),
    )
    bid = SpecField(
        label=gettext_lazy("Spot bid (¥ per chip-hour)"),
        widget=forms.NumberInput(attrs={"min": "0", "step": "0.01", "inputmode": "decimal"}),
        help_text=gettext_lazy("The most you pay per chip-hour; you pay the clearing price, never more."),
    )
    allow_on_demand = forms.BooleanField(
        label=gettext_lazy("Fall back to on-demand chips when spot chips are short"), required=False, initial=True
    )
    allow_other_chips = forms.BooleanField(
        label=gettext_lazy("Move to other chip types when its chips are reclaimed"), required=False, initial=True
    )
    n_epochs = SpecField(
        label=gettext_lazy("Epochs (instead of max steps)"),
        widget=forms.NumberInput(attrs={"min": "0.01", "step": "any", "placeholder": "–"}),
        help_text=gettext_lazy("Passes over your dataset; the quote shows the steps they come to."),
    )
    # Carried over by a re-run (portal/views/rerun.py): settings the page has no field for, kept as they were.
    seq_len = SpecField(widget=forms.HiddenInput)
    lora = SpecField(widget=forms.HiddenInput)
    gradient_checkpointing = SpecField(widget=forms.HiddenInput)
    eval_fraction = SpecField(widget=forms.HiddenInput)
    total_budget = SpecField(widget=forms.HiddenInput)

    def __init__(self, *args, request, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.request = request
        self.spec: JobSpecSerializer | None = None
        # Short option labels: a select shows its option in one line, cut at its width (a phone's too).
        self.fields["model"].widget.choices = [
            (
                name,
                gettext("%(name)s · %(count)s parameters")
                % {"name": name, "count": count_label(resolve_model(name).parameters)},
            )
            for name in CATALOG
        ] + [
            (model.reference, f"{model.name} · {count_label(model.parameters)} · {model.reference}")
            for model in UploadedModel.objects.filter(owner=request.user)
        ]
        self.fields["dataset"].widget.choices = [("synthetic", gettext("synthetic · generated text"))] + [
            (
                dataset.reference,
                gettext("%(name)s · %(samples)s samples (%(reference)s)")
                % {"name": dataset.name, "samples": f"{dataset.samples:,}", "reference": dataset.reference},
            )
            for dataset in Dataset.objects.filter(owner=request.user)
        ]
        self.fields["eval_dataset"].widget.choices = [("", gettext("none"))] + self.fields["dataset"].widget.choices[1:]
        self.chip_types = list(ChipType.objects.all())
        self.default_bid = default_bid()
        if self.default_bid is not None:  # ticking Spot finds a bid in place, not an error
            self.fields["bid"].initial = format_amount(self.default_bid)
            preset = gettext("Preset to %(price)s, the lowest on-demand price of the chip types on spot.") % {
                "price": format_price(self.default_bid)
            }
            self.fields["bid"].help_text = f"{self.fields['bid'].help_text} {preset}"
        for name, (label, widget, help_text) in HYPERPARAMETER_FIELDS.items():
            self.fields[hyperparameter_field(name)] = SpecField(label=label, widget=widget, help_text=help_text)
        for chip in self.chip_types:
            self.fields[chip_field(chip.slug)] = SpecField(
                label=chip.name, widget=forms.NumberInput(attrs={"min": "0", "placeholder": "–"})
            )

    @property
    def chip_fields(self) -> list[forms.BoundField]:
        return [self[chip_field(chip.slug)] for chip in self.chip_types]

    @property
    def hyperparameter_fields(self) -> list[forms.BoundField]:
        return [self[hyperparameter_field(name)] for name in HYPERPARAMETER_FIELDS]

    @property
    def sets_advanced(self) -> bool:
        """Open the Advanced section when it holds values or errors."""
        return any(field.value() or field.errors for field in [*self.hyperparameter_fields, self["n_epochs"]])

    @property
    def picks_chips(self) -> bool:
        """Open the hand-pick section when it holds values or errors."""
        return any(field.value() or field.errors for field in self.chip_fields)

    def clean(self) -> dict:
        data = super().clean()
        spec = JobSpecSerializer(data=self.spec_data(data), context={"request": self.request})
        if spec.is_valid():
            self.spec = spec
        else:
            for field, errors in spec.errors.items():
                self.add_spec_errors(field, errors)
        return data

    def spec_data(self, data: dict) -> dict:
        spec = {key: data.get(key, "") for key in SPEC_KEYS}
        spec = {key: value for key, value in spec.items() if value != "" or key not in OPTIONAL_KEYS}
        if spec.get("lora"):
            spec["lora"] = lora_of(spec["lora"])
        if data.get("n_epochs"):  # epochs instead of steps: the steps field keeps its preset, left out here
            spec["n_epochs"] = data["n_epochs"]
            spec.pop("max_steps", None)
        chosen = {name: data.get(hyperparameter_field(name)) for name in HYPERPARAMETER_FIELDS}
        chosen = {name: value for name, value in chosen.items() if value not in ("", None)}
        if chosen:
            spec["hyperparameters"] = chosen
        if data.get("spot"):
            spec.update({key: data.get(key) for key in SPOT_KEYS})
            spec["bid"] = spec["bid"] or self.fields["bid"].initial or None
        counts = {chip.slug: value for chip in self.chip_types if (value := data.get(chip_field(chip.slug)))}
        return {**spec, "chip_counts": counts} if counts else spec

    def add_spec_errors(self, field: str, errors) -> None:
        if field == "chip_counts" and isinstance(errors, dict):
            for slug, messages in errors.items():
                name = chip_field(slug)
                self.add_error(name if name in self.fields else None, [str(m) for m in messages])
        elif field == "hyperparameters" and isinstance(errors, dict):
            for name, messages in errors.items():
                target = hyperparameter_field(name)
                self.add_error(target if target in self.fields else None, [str(m) for m in messages])
        elif field == "chip_counts":
            self.add_error(
                None, [gettext("Chips picked by hand: %(message)s") % {"message": message} for message in errors]
            )
        else:
            self.add_error(field if field in self.fields else None, [str(message) for message in errors])

    def job_spec(self) -> JobSpec:
        """The validated spec; call after is_valid()."""
        return self.spec.job_spec()


CARRIED_KEYS = ("seq_len", "lora", "gradient_checkpointing", "eval_fraction", "total_budget")
SPEC_KEYS = (
    "model",
    "dataset",
    "mode",
    "eval_dataset",
    "eval_every",
    "policy",
    "max_budget",
    "max_steps",
    "per_device_batch_size",
    "name",
    *CARRIED_KEYS,
)  # n_epochs and the hyperparameters join in spec_data when filled in
OPTIONAL_KEYS = ("mode", "eval_dataset", "eval_every", *CARRIED_KEYS)  # left empty: the API's defaults
SPOT_KEYS = ("spot", "bid", "allow_on_demand", "allow_other_chips")


def chip_field(slug: str) -> str:
    return f"chips_{slug}"


def hyperparameter_field(name: str) -> str:
    return f"hp_{name}"


def _number(step: str = "any", minimum: str = "0") -> forms.NumberInput:
    return forms.NumberInput(attrs={"min": minimum, "step": step, "placeholder": gettext_lazy("default")})


# The Advanced section: each hyperparameter the API takes (workers/api/hyperparameters.py), empty for its default.
_ = gettext_lazy
HYPERPARAMETER_FIELDS = {
    "learning_rate": (
        _("Learning rate"),
        _number(),
        _("Peak rate. Default: 2e-4 for LoRA, 2e-5 for a full fine-tune, 3e-3 to 1e-4 by size from scratch."),
    ),
    "lr_scheduler": (
        _("Schedule"),
        forms.Select(choices=[("", _("cosine (default)")), ("constant", _("constant")), ("linear", _("linear"))]),
        _("After warm-up: stay at the peak, or decay to the floor at the last step."),
    ),
    "warmup_ratio": (_("Warm-up (share of steps)"), _number(), _("Default 3% (1% from scratch).")),
    "warmup_steps": (_("Or warm-up steps"), _number("1"), ""),
    "min_lr_ratio": (_("Floor (share of the peak)"), _number(), _("Where linear and cosine end. Default 0.1.")),
    "weight_decay": (_("Weight decay"), _number(), _("Default 0 for fine-tuning, 0.1 from scratch.")),
    "adam_beta1": (_("Adam β1"), _number(), _("Default 0.9.")),
    "adam_beta2": (_("Adam β2"), _number(), _("Default 0.95.")),
    "adam_epsilon": (_("Adam ε"), _number(), _("Default 1e-8.")),
    "max_grad_norm": (_("Clip gradients at norm"), _number(), _("Default 1; 0 never clips.")),
    "seed": (_("Seed"), _number("1"), _("Default: the job's number.")),
    "checkpoint_every": (
        _("Checkpoint every N steps"),
        _number("1", "1"),
        _("Default: a tenth of the run, 10 to 200."),
    ),
    "train_on_inputs": (
        _("Train on prompts too"),
        forms.Select(choices=[("", _("no (default)")), ("true", _("yes"))]),
        _("Chat and prompt data: the loss counts the prompts' tokens as well as the answers'."),
    ),
}


def lora_of(text: str):
    """The carried LoRA settings as the spec takes them; text that isn't a JSON object goes to the serializer as
    it is, which names the field."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def count_label(count: int) -> str:
    """A parameter count in a few characters: "212k", "6.7B", "69B"."""
    for limit, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if count >= limit:
            return f"{count / limit:.2g}{suffix}" if count < 10 * limit else f"{count / limit:.0f}{suffix}"
    return str(count)


class DatasetUploadForm(forms.Form):
    """A text or JSONL file to train on; store_dataset checks its content."""

    # Empty files pass here so that store_dataset, shared with the API, says what is wrong.
    file = forms.FileField(
        label=gettext_lazy("File"),
        allow_empty_file=True,
        widget=forms.ClearableFileInput(attrs={"accept": ".txt,.jsonl,.ndjson,text/plain,application/jsonl"}),
        help_text=gettext_lazy(
            "One record per line: plain text, or JSON lines all of one kind: {“text”}, chats {“messages”: "
            "[{“role”, “content”}, …]} or {“prompt”, “completion”}."
        ),
    )
    name = forms.CharField(
        label=gettext_lazy("Name (optional)"),
        max_length=120,
        required=False,
        strip=True,
        help_text=gettext_lazy("Defaults to the file name."),
    )
