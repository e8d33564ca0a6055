"""The page kernels that move rows and pages, through the Python package:
read_kv (rows back out, 8-bit codes dequantized), gather_pages and
scatter_pages (their buffers allocated when left out), compact_copy, on a
plain cache and an MLA cache, and scatter_pages' repeated page id as an
attnc.Error with nothing written."""

import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

import attnc  # noqa: E402

SPEC = """
variant moves_nhd {
  heads qo = 4, kv = 2
  head_dim 8
  dtype f32
  cache paged(page_size = 4, layout = NHD)
  kernels append, read_kv, gather_pages, scatter_pages, compact_copy
}
variant moves_mla {
  mla(heads = 2, kv_lora_rank = 8, rope_dim = 4)
  dtype f32
  cache paged(page_size = 4)
  scale 0.1
  kernels append, read_kv, gather_pages, scatter_pages, compact_copy
}
"""


class PageMovesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.lib = attnc.compile(SPEC)

    def pools(self, mla):
        """The variant, its pool names and a 5-page cache written by append
        at slots 5 and 9 (rows a, b), the rows themselves."""
        rng = np.random.default_rng(3)
        if mla:
            v, (a, b) = self.lib["moves_mla"], ("ckv", "kpe")
            pa, pb = np.zeros((5, 4, 8), np.float32), np.zeros((5, 4, 4), np.float32)
            ra, rb = rng.random((2, 8), np.float32), rng.random((2, 4), np.float32)
        else:
            v, (a, b) = self.lib["moves_nhd"], ("k", "v")
            pa, pb = np.zeros((5, 4, 2, 8), np.float32), np.zeros((5, 4, 2, 8), np.float32)
            ra, rb = rng.random((2, 2, 8), np.float32), rng.random((2, 2, 8), np.float32)
        v.append(**{a: ra, b: rb, "position_map": np.array([5, 9], np.int32),
                    a + "_pages": pa, b + "_pages": pb})
        return v, a, b, pa, pb, ra, rb

    def test_read_gather_scatter_compact(self):
        for mla in (False, True):
            with self.subTest(mla=mla):
                v, a, b, pa, pb, ra, rb = self.pools(mla)
                ka, kb = v.read_kv(**{a + "_pages": pa, b + "_pages": pb, "num_pages": 5,
                                      "position_map": np.array([9, 5], np.int32)})
                np.testing.assert_array_equal(ka, ra[::-1])
                np.testing.assert_array_equal(kb, rb[::-1])
                ba, bb = v.gather_pages(**{a + "_pages": pa, b + "_pages": pb, "num_pages": 5,
                                           "page_ids": np.array([2, 1], np.int32)})
                np.testing.assert_array_equal(ba, pa[[2, 1]])
                qa, qb = np.zeros_like(pa), np.zeros_like(pb)
                v.scatter_pages(**{a + "_buf": ba, b + "_buf": bb, "page_ids": np.array([4, 0], np.int32),
                                   a + "_pages": qa, b + "_pages": qb, "num_pages": 5})
                np.testing.assert_array_equal(qa[[4, 0]], pa[[2, 1]])
                np.testing.assert_array_equal(qb[[4, 0]], pb[[2, 1]])
                # Slot 9 moves to 8, then slot 5 (page 1, offset 1) to 9.
                v.compact_copy(**{a + "_pages": pa, b + "_pages": pb, "num_pages": 5,
                                  "copy_indptr": np.array([0, 2], np.int32),
                                  "copy_src": np.array([9, 5], np.int32), "copy_dst": np.array([8, 9], np.int32)})
                np.testing.assert_array_equal(pa[2, 0], ra[1])
                np.testing.assert_array_equal(pa[2, 1], ra[0])

    def test_scatter_repeated_page_id(self):
        v, a, b, pa, pb, ra, rb = self.pools(False)
        buf = np.ones((2,) + pa.shape[1:], np.float32)
        before = pa.copy()
        with self.assertRaises(attnc.Error) as cm:
            v.scatter_pages(k_buf=buf, v_buf=buf, page_ids=np.array([3, 3], np.int32),
                            k_pages=pa, v_pages=pb, num_pages=5)
        self.assertEqual(cm.exception.code, -5)
        np.testing.assert_array_equal(pa, before)


if __name__ == "__main__":
    unittest.main()
