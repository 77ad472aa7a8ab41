"""test_model.py - a real model: a small torch.nn.Transformer and its Adam
optimizer after three training steps, with bf16 copies of the weights, an
int64 step and a byte object (the RNG state), saved with ckptfs.save and
loaded into a fresh model and optimizer (the model's tensors in place,
through load(into=...)); every tensor is torch.equal to the original, and
one more training step gives the same loss, bit for bit, and the same
weights."""
import struct

import util
import ckptfs

torch = util.need_torch()


def build(seed):
    torch.manual_seed(seed)
    model = torch.nn.Transformer(d_model=32, nhead=4, num_encoder_layers=2,
                                 num_decoder_layers=2, dim_feedforward=64,
                                 dropout=0.0, batch_first=True)
    return model, torch.optim.Adam(model.parameters(), lr=1e-3)


def batch(step):
    g = torch.Generator().manual_seed(1000 + step)
    src = torch.randn(4, 10, 32, generator=g)
    tgt = torch.randn(4, 7, 32, generator=g)
    return src, tgt, torch.randn(4, 7, 32, generator=g)


def train_step(model, opt, step):
    src, tgt, want = batch(step)
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(src, tgt), want)
    loss.backward()
    opt.step()
    return loss.detach()


def float_bits(x):
    return struct.pack("<f", x.item())


class Model(util.TempDir):
    def test_transformer_adam_roundtrip(self):
        model, opt = build(0)
        for step in range(3):
            train_step(model, opt, step)
        state = {
            "model": model.state_dict(),
            "optim": opt.state_dict(),
            "bf16": {k: v.detach().to(torch.bfloat16)
                     for k, v in model.named_parameters()},
            "step": torch.tensor(3, dtype=torch.int64),
            "rng": bytes(torch.get_rng_state().numpy()),
        }
        ck = self.path("step-3")
        ckptfs.save(ck, state, meta={"step": 3})

        model2, opt2 = build(1)      # other weights, no optimizer state
        self.assertFalse(all(torch.equal(a, b) for a, b in zip(
            model.parameters(), model2.parameters())))
        sd2 = model2.state_dict()
        ckptfs.load(ck, into={"model": sd2})    # the parameters, in place
        loaded = ckptfs.load(ck)
        opt2.load_state_dict(loaded["optim"])

        for k, v in model.state_dict().items():
            self.assertTrue(torch.equal(v, model2.state_dict()[k]), k)
            self.assertTrue(torch.equal(v, loaded["model"][k]), k)
        s1, s2 = opt.state_dict(), opt2.state_dict()
        self.assertEqual(s1["param_groups"], s2["param_groups"])
        self.assertEqual(sorted(s1["state"]), sorted(s2["state"]))
        for i, st in s1["state"].items():
            for name, t in st.items():
                self.assertTrue(torch.equal(t, s2["state"][i][name]),
                                (i, name))
                self.assertEqual(t.dtype, s2["state"][i][name].dtype)
        for k, v in state["bf16"].items():
            self.assertEqual(loaded["bf16"][k].dtype, torch.bfloat16)
            self.assertTrue(torch.equal(v, loaded["bf16"][k]), k)
        self.assertEqual(loaded["step"].dtype, torch.int64)
        self.assertEqual(loaded["step"].item(), 3)
        self.assertEqual(loaded["rng"], state["rng"])
        torch.set_rng_state(torch.frombuffer(bytearray(loaded["rng"]),
                                             dtype=torch.uint8))

        loss1 = train_step(model, opt, 3)
        loss2 = train_step(model2, opt2, 3)
        self.assertEqual(float_bits(loss1), float_bits(loss2))
        for (k, a), b in zip(model.named_parameters(), model2.parameters()):
            self.assertTrue(torch.equal(a, b), k)


if __name__ == "__main__":
    util.main()
