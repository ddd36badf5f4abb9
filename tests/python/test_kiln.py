"""ctest python_api: the installed `kiln` package (pip install . in the venv of the
python_venv fixture) on examples/tiny_cnn and kiln's MNIST network, from NumPy and from
PyTorch CPU tensors: outputs against ONNX's reference output, zero copy in and out
(pointers), IO binding, errors as exceptions, a GIL-free run from two threads, and training
(steps, checkpoint round trip, export).

python test_kiln.py SOURCE_DIR WORK_DIR
"""
import os
import re
import sys
import threading
import unittest

import numpy as np
import onnx
import torch

SRC = os.path.abspath(sys.argv[1])
WORK = os.path.abspath(sys.argv[2])
sys.argv[1:] = sys.argv[3:]  # the rest is unittest's

import kiln  # noqa: E402  (the installed package, not the source tree)

MODEL = os.path.join(SRC, "examples", "tiny_cnn.onnx")
X = np.load(os.path.join(SRC, "examples", "tiny_cnn_x.npy"))
WANT = np.load(os.path.join(SRC, "examples", "tiny_cnn_expected.npy"))


def close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)


class Package(unittest.TestCase):
    def test_installed_not_source(self):
        self.assertNotIn(os.path.join(SRC, "python"), os.path.dirname(kiln.__file__))
        self.assertTrue(kiln._kiln.__file__.endswith(".abi3.so"), kiln._kiln.__file__)
        self.assertTrue(os.path.exists(os.path.join(os.path.dirname(kiln.__file__), "py.typed")))
        self.assertTrue(os.path.exists(os.path.join(os.path.dirname(kiln.__file__), "_kiln.pyi")))

    def test_handles_not_callable(self):
        for cls in (kiln._kiln.Tensor, kiln._kiln.Model):
            with self.assertRaises(TypeError):
                cls()
        with self.assertRaises(TypeError):
            kiln.Tensor(object())

    def test_version_is_the_headers(self):
        with open(os.path.join(SRC, "include", "kiln.h")) as f:
            want = re.search(r'#define KILN_VERSION "([0-9.]+)"', f.read()).group(1)
        self.assertEqual(kiln.version(), want)
        self.assertEqual(kiln.__version__, want)


class TinyCNN(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sess = kiln.Session(MODEL, threads=1)
        cls.out = cls.sess.outputs[0].name

    def test_io_info(self):
        g = onnx.load(MODEL).graph
        (i,), (o,) = self.sess.inputs, self.sess.outputs
        self.assertEqual(i.name, g.input[0].name)
        self.assertEqual(o.name, g.output[0].name)
        self.assertEqual((i.dtype, o.dtype), ("float32", "float32"))
        dims = [d.dim_param or d.dim_value for d in g.input[0].type.tensor_type.shape.dim]
        self.assertEqual(list(i.shape), dims)
        self.assertIsInstance(i.shape[0], str)  # the symbolic batch, by its name
        self.assertEqual(o.shape, (i.shape[0], WANT.shape[1]))

    def test_numpy(self):
        y = self.sess.run({"x": X})[self.out]
        self.assertIsInstance(y, kiln.Tensor)
        self.assertEqual((y.shape, y.dtype, y.device), (WANT.shape, "float32", "cpu"))
        close(y.numpy(), WANT)
        close(np.asarray(y), WANT)

    def test_torch_cpu(self):
        y = self.sess.run([torch.from_numpy(X.copy())])[self.out]
        close(torch.from_dlpack(y).numpy(), WANT)

    def test_from_bytes_and_model(self):
        with open(MODEL, "rb") as f:
            data = f.read()
        m = kiln.Model(data)
        self.assertEqual([i.name for i in m.inputs], ["x"])
        close(kiln.Session(m).run([X])[self.out].numpy(), WANT)

    def test_other_batch(self):
        close(self.sess.run([X[:1]])[self.out].numpy(), WANT[:1])

    def test_output_shares_memory(self):
        y = self.sess.run([X])[self.out]
        t = torch.from_dlpack(y)
        a = np.from_dlpack(y)
        self.assertEqual(t.data_ptr(), y.data_ptr)
        self.assertEqual(a.ctypes.data, y.data_ptr)
        t[0, 0] = 42.0  # a write through torch shows in numpy's view of the same memory
        self.assertEqual(a[0, 0], 42.0)
        del y
        self.assertEqual(float(t[0, 0]), 42.0)  # the view keeps the memory alive

    def test_output_outlives_session(self):
        s = kiln.Session(MODEL, threads=1)
        t = torch.from_dlpack(s.run([X])[self.out])
        del s
        close(t.numpy(), WANT)

    def test_input_bound_without_copy(self):
        x = X.copy()
        kx = kiln.from_dlpack(x)
        self.assertEqual(kx.data_ptr, x.ctypes.data)
        t = torch.from_numpy(X.copy())
        kt = kiln.from_dlpack(t)
        self.assertEqual(kt.data_ptr, t.data_ptr())
        # kiln reads the caller's memory at run time: a change after binding is seen.
        zero = self.sess.run([np.zeros_like(X)])[self.out].numpy().copy()
        t.zero_()
        close(self.sess.run([kt])[self.out].numpy(), zero)
        close(self.sess.run([kx])[self.out].numpy(), WANT)

    def test_io_binding(self):
        out = np.full(WANT.shape, np.nan, np.float32)
        ptr = out.ctypes.data
        r = self.sess.run({"x": X}, outputs={self.out: out})
        self.assertIs(r[self.out], out)
        self.assertEqual(out.ctypes.data, ptr)
        close(out, WANT)
        tout = torch.empty(WANT.shape)
        r = self.sess.run([torch.from_numpy(X.copy())], outputs={self.out: tout})
        self.assertIs(r[self.out], tout)
        close(tout.numpy(), WANT)

    def test_capsule_protocol(self):
        y = self.sess.run([X])[self.out]
        cap = y.__dlpack__()
        t = torch.utils.dlpack.from_dlpack(cap)  # the consumer renames it "used_dltensor"
        with self.assertRaises(TypeError):
            kiln._kiln.from_dlpack(cap)  # a used capsule is refused
        del cap, t
        unused = y.__dlpack__()
        del unused  # an unconsumed capsule calls the deleter (no leak, no double free)
        self.assertEqual(y.__dlpack_device__(), (1, 0))

    def test_passes_and_options(self):
        s = kiln.Session(MODEL, threads=1, disable=["fold-bn", "fuse-conv"], deterministic=True,
                         strict_fp32=True, no_fold=True)
        close(s.run([X])[self.out].numpy(), WANT)
        self.assertGreater(s.stats()["nodes"], 0)
        with self.assertRaises(kiln.InvalidArgumentError) as e:
            kiln.Session(MODEL, disable=["fold-bnx"])
        self.assertIn("fold-bnx", str(e.exception))

    def test_two_threads(self):
        results = [None, None]

        def work(k):
            results[k] = self.sess.run([X])[self.out].numpy().copy()

        th = [threading.Thread(target=work, args=(k,)) for k in range(2)]
        for t in th:
            t.start()
        for t in th:
            t.join()
        for r in results:
            close(r, WANT)


class Errors(unittest.TestCase):
    def setUp(self):
        self.sess = kiln.Session(MODEL, threads=1)

    def test_wrong_shape(self):
        with self.assertRaises(kiln.ShapeError) as e:
            self.sess.run({"x": X[:, :2]})
        self.assertIsInstance(e.exception, kiln.Error)
        self.assertEqual(e.exception.status, 5)
        self.assertIn("'x'", str(e.exception))  # names the input

    def test_wrong_dtype(self):
        with self.assertRaises(kiln.DTypeError) as e:
            self.sess.run([X.astype(np.float64)])
        self.assertIn("'x'", str(e.exception))

    def test_names(self):
        with self.assertRaises(kiln.InvalidArgumentError) as e:
            self.sess.run({"nope": X})
        self.assertIn("nope", str(e.exception))
        with self.assertRaises(kiln.InvalidArgumentError):
            self.sess.run({"x": X}, outputs={"nope": np.zeros(3)})

    def test_bad_output_array(self):
        with self.assertRaises(kiln.ShapeError):
            self.sess.run([X], outputs={self.sess.outputs[0].name: np.zeros((4, 11), np.float32)})

    def test_strided_input(self):
        with self.assertRaises(kiln.UnsupportedError) as e:
            self.sess.run([torch.from_numpy(X.copy()).transpose(2, 3)])
        self.assertIn("strides", str(e.exception))

    def test_files(self):
        with self.assertRaises(kiln.IOError) as e:
            kiln.Session(os.path.join(WORK, "missing.onnx"))
        self.assertIn("missing.onnx", str(e.exception))
        with self.assertRaises(kiln.ParseError):
            kiln.Session(b"not an onnx file")

    def test_device(self):
        with self.assertRaises(kiln.InvalidArgumentError):
            kiln.Session(MODEL, device="tpu")
        with self.assertRaises(kiln.InvalidArgumentError):
            kiln.Session(MODEL, precision="fp8")


class Log(unittest.TestCase):
    def tearDown(self):
        kiln.set_log(None)

    def test_messages(self):
        got = []
        kiln.set_log(lambda level, msg: got.append((level, msg)), "info")
        kiln.Session(MODEL, threads=1).run([X])  # a plan is built: an "info" message
        self.assertTrue(any(lv == "info" for lv, _ in got), got)
        got.clear()
        with self.assertRaises(kiln.ShapeError) as e:
            kiln.Session(MODEL, threads=1).run([X[:, :2]])
        # the failed call's message, as raised (the log adds the status's name before it)
        self.assertTrue(any(lv == "error" and m.endswith(str(e.exception)) for lv, m in got), got)
        kiln.set_log(None)
        got.clear()
        kiln.Session(MODEL, threads=1).run([X])
        self.assertEqual(got, [])
        with self.assertRaises(kiln.InvalidArgumentError):
            kiln.set_log(print, "loud")


class Training(unittest.TestCase):
    def batch(self, n=16, seed=0):
        rng = np.random.default_rng(seed)
        return (rng.standard_normal((n, 1, 28, 28)).astype(np.float32),
                rng.integers(0, 10, n).astype(np.int64))

    def test_steps_checkpoint_export(self):
        model = kiln.Model.mnist_net(batch=-1, seed=3, dropout=False)
        self.assertEqual([i.name for i in model.inputs], ["image", "label"])
        tr = kiln.Trainer(model, optimizer="sgd", lr=0.05, momentum=0.9, threads=1)
        images, labels = self.batch()
        losses = [tr.step({"image": images, "label": labels}) for _ in range(4)]
        self.assertTrue(all(np.isfinite(losses)), losses)
        self.assertLess(losses[-1], losses[0])  # the same batch four times: the loss falls
        st = tr.stats
        self.assertEqual((st["micro_steps"], st["steps"]), (4, 4))
        self.assertGreater(st["param_count"], 1_000_000)

        ckpt = os.path.join(WORK, "mnist.safetensors")
        tr.save(ckpt, 1, 7)
        before = kiln.Session(tr.export("logprobs"), threads=1).run({"image": images})["logprobs"].numpy().copy()
        tr.step([torch.from_numpy(images), torch.from_numpy(labels)])  # torch tensors, list order
        after = kiln.Session(tr.export("logprobs"), threads=1).run([images])["logprobs"].numpy()
        self.assertFalse(np.allclose(before, after))
        self.assertEqual(tr.load(ckpt), (1, 7))
        again = kiln.Session(tr.export("logprobs"), threads=1).run([images])["logprobs"].numpy()
        np.testing.assert_array_equal(again, before)
        self.assertEqual(before.shape, (16, 10))
        np.testing.assert_allclose(np.exp(before).sum(1), 1, rtol=1e-5)

    def test_train_epoch(self):
        tr = kiln.Trainer(kiln.Model.mnist_net(seed=1, dropout=False), optimizer="adam", lr=1e-3, threads=1)
        images, labels = self.batch(24, seed=1)
        loss = tr.train_epoch(images, labels, batch=8, seed=0, epoch=0)
        self.assertTrue(np.isfinite(loss))
        self.assertEqual(tr.stats["steps"], 3)

    def test_large_batch_options(self):
        # LARS / LAMB with no decay on 1-D parameters, clipping and the poly schedule by keyword
        images, labels = self.batch(16, seed=2)
        for opt, lr in (("lars", 1.0), ("lamb", 1e-3)):
            tr = kiln.Trainer(kiln.Model.mnist_net(seed=2, dropout=False), optimizer=opt, lr=lr, momentum=0.9,
                              weight_decay=1e-4, no_decay_bn_bias=True, clip_grad_norm=5.0, lars_eta=0.01,
                              schedule="poly", total_steps=10, warmup_steps=2, threads=1)
            losses = [tr.step({"image": images, "label": labels}) for _ in range(4)]
            self.assertTrue(all(np.isfinite(losses)), losses)
            self.assertLess(losses[-1], losses[0], opt)
            self.assertEqual(tr.stats["steps"], 4)
        with self.assertRaises(kiln.InvalidArgumentError):
            kiln.Trainer(kiln.Model.mnist_net(seed=2), schedule="poly", total_steps=2, warmup_steps=2, threads=1)

    def test_errors(self):
        with self.assertRaises(kiln.InvalidArgumentError):
            kiln.Trainer(kiln.Model.mnist_net(), optimizer="lbfgs")
        with self.assertRaises(kiln.InvalidArgumentError):
            kiln.Trainer(kiln.Model.mnist_net(), learning_rate=0.1)
        with self.assertRaises(kiln.Error) as e:
            kiln.Trainer(kiln.Model.mnist_net(), loss="logprobs")  # not a scalar
        self.assertIn("logprobs", str(e.exception))


if __name__ == "__main__":
    os.makedirs(WORK, exist_ok=True)
    unittest.main(verbosity=2)
