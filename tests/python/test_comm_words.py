"""test_comm_words.py — the Python bridge's communication words are the one list's.

proto/proto_class.h keeps the words that make an op name communication
(PROTO_COMM_WORDS) and the prefix (PROTO_COMM_PREFIX) for the daemon and the
importer; tracectl/torch.py keeps a copy (COMM_WORDS, COMM_PREFIX) for its
profiler mode, which must be the whole list, in the same order. Both are read
as text (torch.py imports torch, which this test does not need).
"""

import ast
import os
import re
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
HEADER = os.path.join(ROOT, "proto", "proto_class.h")
BRIDGE = os.path.join(ROOT, "client", "python", "tracectl", "torch.py")


def header_words():
    text = open(HEADER, encoding="utf-8").read()
    body = text[text.index("#define PROTO_COMM_WORDS(X)"):text.index("#define PROTO_COMM_PREFIX")]
    words = re.findall(r'X\("([^"]+)", (PROTO_COMM_STRICT|PROTO_COMM_LOOSE)\)', body)
    prefix = re.search(r'#define PROTO_COMM_PREFIX "([^"]+)"', text).group(1)
    return [w for w, _ in words], prefix


def bridge_constants():
    tree = ast.parse(open(BRIDGE, encoding="utf-8").read())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name) and \
                node.targets[0].id in ("COMM_WORDS", "COMM_PREFIX"):
            found[node.targets[0].id] = ast.literal_eval(node.value)
    return found


class CommWords(unittest.TestCase):
    def test_the_bridge_has_the_headers_words_in_order(self):
        words, prefix = header_words()
        self.assertGreater(len(words), 20)
        self.assertIn("msccl", words)  # one the importer brought
        self.assertIn("broadcast", words)  # one the daemon brought
        found = bridge_constants()
        self.assertEqual(list(found["COMM_WORDS"]), words)
        self.assertEqual(found["COMM_PREFIX"], prefix)
        self.assertEqual(prefix, "mpi_")

    def test_every_word_is_lower_case_and_unique(self):
        words, _ = header_words()
        self.assertEqual(len(set(words)), len(words))
        for w in words:
            self.assertEqual(w, w.lower(), w)


if __name__ == "__main__":
    unittest.main()
