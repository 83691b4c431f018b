"""models/lm_loss.py against the definitions: mean cross-entropy over the valid targets (one valid target
included), the caller's own main loss, auxiliary losses added once each and summed per name over layers."""
import torch
import torch.nn.functional as F

from nexus.models.lm_loss import AuxLossModule, LMOutput, collect_aux_losses, cross_entropy_mean, lm_loss


def _logits_labels():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 7, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 7, (2, 5), generator=g)
    return logits, labels


def test_mean_cross_entropy_over_valid_targets_even_one():
    logits, labels = _logits_labels()
    labels[0, :3] = -100
    flat, lab = logits.reshape(-1, 7), labels.reshape(-1)
    keep = lab != -100
    want = -torch.log_softmax(flat[keep], -1).gather(1, lab[keep, None]).mean()
    torch.testing.assert_close(cross_entropy_mean(logits, labels).double(), want, atol=0, rtol=1e-6)
    one = torch.full_like(labels, -100)
    one[1, 2] = labels[1, 2]  # a single valid target: its own CE, not half of it
    want_one = -torch.log_softmax(logits[1, 2], -1)[labels[1, 2]]
    torch.testing.assert_close(cross_entropy_mean(logits, one).double(), want_one, atol=0, rtol=1e-6)


def test_main_loss_and_auxiliary_losses_are_each_added_once():
    logits, labels = _logits_labels()
    ce = F.cross_entropy(logits.reshape(-1, 7).float(), labels.reshape(-1))
    aux = {"balance": torch.tensor(0.25), "router_z": torch.tensor(0.5)}
    out = lm_loss(LMOutput(logits=logits, aux_losses=dict(aux)), labels, z_loss=0.0)
    torch.testing.assert_close(out.loss, ce + 0.75, atol=0, rtol=1e-6)
    main = torch.tensor(3.0)  # deep supervision's summed CE: the loss starts from it, ce_loss stays the CE
    out = lm_loss(LMOutput(logits=logits, aux_losses=dict(aux)), labels, z_loss=0.0, main=main)
    torch.testing.assert_close(out.loss, torch.tensor(3.75), atol=0, rtol=1e-6)
    torch.testing.assert_close(out.ce_loss, ce, atol=0, rtol=1e-6)


def test_auxiliary_losses_are_summed_per_name_over_layers():
    class Layer(AuxLossModule):
        def __init__(self, losses):
            super().__init__()
            self.aux_losses_out = losses

    model = torch.nn.Sequential(Layer({"balance": torch.tensor(1.0)}), torch.nn.Linear(2, 2),
                                Layer({"balance": torch.tensor(2.5), "router_z": torch.tensor(0.125)}))
    got = collect_aux_losses(model)
    assert set(got) == {"balance", "router_z"}
    assert float(got["balance"]) == 3.5 and float(got["router_z"]) == 0.125
