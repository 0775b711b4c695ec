#!/usr/bin/env python3
"""Builds the tokenizer parity corpus tests/data/tokenizer/corpus.jsonl (one JSON string a line)
and tests/data/tokenizer/invalid_utf8.txt (one hex-encoded byte string a line).

Deterministic (fixed seed), pure standard library. Every category the parity tests must cover:
many scripts, combining marks and decomposed (non-NFC) text, emoji with ZWJ sequences, skin
tones, flags and keycaps, CJK, Arabic, Hebrew, Devanagari, Thai, whitespace runs (spaces, tabs,
\\r\\n, NBSP, NEL, ideographic space, trailing), digits and long numbers, source code, URLs,
JSON, contractions, special tokens inside text, random code points, and long strings.
The hand-written sentences are the author's own.

Usage: tools/tokenizer_corpus.py [OUT_DIR]   (default tests/data/tokenizer)
"""
import json
import os
import random
import sys
import unicodedata

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
    "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich.",
    "Voix ambiguë d'un cœur qui, au zéphyr, préfère les jattes de kiwis.",
    "El pingüino Wenceslao hizo kilómetros bajo exhaustiva lluvia y frío.",
    "Pchnąć w tę łódź jeża lub ośm skrzyń fig.",
    "Příliš žluťoučký kůň úpěl ďábelské ódy.",
    "Árvíztűrő tükörfúrógép.",
    "Pijamalı hasta yağız şoföre çabucak güvendi.",
    "Tiếng Việt có dấu: Trăm năm trong cõi người ta.",
    "我能吞下玻璃而不伤身体。今天天气很好，我们去公园散步吧！",
    "私はガラスを食べられます。それは私を傷つけません。カタカナとひらがな。",
    "나는 유리를 먹을 수 있어요. 그래도 아프지 않아요. 한국어 문장입니다.",
    "أنا قادر على أكل الزجاج و هذا لا يؤلمني. مرحبا بالعالم!",
    "אני יכול לאכול זכוכית וזה לא מזיק לי. שָׁלוֹם עוֹלָם",
    "मैं काँच खा सकता हूँ और मुझे उससे कोई चोट नहीं पहुंचती. नमस्ते दुनिया।",
    "ฉันกินกระจกได้ แต่มันไม่ทำให้ฉันเจ็บ สวัสดีชาวโลก",
    "আমি কাঁচ খেতে পারি, তাতে আমার কোনো ক্ষতি হয় না।",
    "நான் கண்ணாடி சாப்பிடுவேன், அதனால் எனக்கு ஒரு கேடும் வராது.",
    " నేను గాజు తినగలను మరియు అలా చేసినా నాకు ఏమి ఇబ్బంది లేదు",
    "ನಾನು ಗಾಜನ್ನು ತಿನ್ನಬಲ್ಲೆ ಮತ್ತು ಅದರಿಂದ ನನಗೆ ನೋವಾಗುವುದಿಲ್ಲ.",
    "മലയാളം ഒരു ദ്രാവിഡ ഭാഷയാണ്.",
    "ਮੈਂ ਗਲਾਸ ਖਾ ਸਕਦਾ ਹਾਂ ਅਤੇ ਇਸ ਨਾਲ ਮੈਨੂੰ ਕੋਈ ਤਕਲੀਫ ਨਹੀਂ.",
    "હું કાચ ખાઇ શકુ છુ અને તેનાથી મને દર્દ નથી થતુ.",
    "ຂ້ອຍກິນແກ້ວໄດ້ໂດຍທີ່ມັນບໍ່ໄດ້ເຮັດໃຫ້ຂ້ອຍເຈັບ.",
    "ཤེལ་སྒོ་ཟ་ནས་ང་ན་གི་མ་རེད།",
    "ខ្ញុំអាចញុំកញ្ចក់បាន ដោយគ្មានបញ្ហារ",
    "ကျွန်တော် ကျွန်မ မှန်စားနိုင်တယ်။",
    "მინას ვჭამ და არა მტკივა.",
    "Կրնամ ապակի ուտել և ինծի անհանգիստ չըներ։",
    "ብርሃን ያለው ቤት ነው። ሰላም ለዓለም",
    "Mi povas manĝi vitron, ĝi ne damaĝas min.",
    "Ég get etið gler án þess að meiða mig.",
    "Aš galiu valgyti stiklą ir jis manęs nežeidžia.",
    "ᚠᛇᚻ᛫ᛒᛦᚦ᛫ᚠᚱᚩᚠᚢᚱ᛫ᚠᛁᚱᚪ᛫ᚷᛖᚻᚹᛦᛚᚳᚢᛗ",
    "𐌰𐌽𐌰 𐌸𐌰𐍄𐌰 𐍃𐌹𐌽𐌳𐌰 — Gothic letters; 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕄𝕒𝕥𝕙 𝒮𝒸𝓇𝒾𝓅𝓉",
    "I'm sure you'll see they've done it, she'd said. DON'T SHOUT! It's 'quoted'. ain’t",
    "He said: 'S 'T 'RE 'VE 'M 'LL 'D 'ſ — and ‘curly’ “double” quotes…",
]

CODE = [
    "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "#include <vector>\nint main() {\n\tstd::vector<int> v{1, 2, 3};\n\tfor (auto& x : v) x *= 2;\n\treturn 0;\n}\n",
    "const f = async (x) => { await fetch(`/api/${x}?q=1&r=2`); return x ?? null; };\r\n",
    "fn main() {\n    let s: Vec<u8> = b\"hi\".to_vec();\n    println!(\"{:?}\", s);\n}\n",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"héllo, 世界\")\n}\n",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%ann%' ORDER BY id DESC;",
    "<!DOCTYPE html>\n<html><body><p class=\"x\">Hi &amp; bye</p><br/></body></html>\n",
    "#!/bin/bash\nfor f in *.txt; do\n  echo \"$f\" | tr 'a-z' 'A-Z' >> out.log 2>&1\ndone\n",
    "    \n\n    x = [i**2 for i in range(10) if i % 2 == 0]  # squares   \n\t\t\n",
    "public class A { public static void main(String[] a) { System.out.println(a.length); } }",
    "\\begin{equation} E = mc^2 \\quad \\int_0^\\infty e^{-x^2} dx = \\frac{\\sqrt{\\pi}}{2} \\end{equation}",
    "x := 0x7fff_ffff; y := 1e-10; z := 3.14159e+00; w = ~a ^ b | c & d << 2 >> 1;",
]

URLS = [
    "https://example.com/path/to/page?query=value&other=1#section",
    "http://user:pass@host.example.org:8080/a/b/c.html?x=%20y&z=%E4%BD%A0",
    "ftp://files.example.net/pub/file-1.2.3.tar.gz",
    "mailto:someone@example.com?subject=Hello%20World",
    "https://例え.jp/パス?検索=テスト",
    "www.example.co.uk/index.php?id=123&lang=en_US",
]

SPECIALS3 = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|box_end|>",
             "<|vision_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_pad|>",
             "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>",
             "</think>", "<|audio_start|>", "<tts_pad>", "<tts_text_bos_single>", "<|audio_pad|>"]
NEAR_SPECIALS = ["<|im_start|", "<|im_end", "|im_start|>", "<|im_start|>>", "<<|im_end|>",
                 "<think", "</think", "<|endoftext|><|endoftext|>", "<|IM_START|>", "< think >"]

EMOJI = ["😀", "👍", "👍🏻", "👍🏽", "👍🏿", "👨‍👩‍👧‍👦", "👩🏽‍💻", "🧑‍🤝‍🧑", "🏳️‍🌈", "🏴‍☠️",
         "🇺🇸", "🇯🇵", "🇩🇪🇫🇷", "1️⃣", "#️⃣", "❤️", "❤", "☺️", "🫠", "🦄", "🧙‍♀️", "🏃🏾‍♂️",
         "👁️‍🗨️", "🐻‍❄️", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "©️", "™", "🔥🔥🔥", "🤷‍♂️"]

SPACES = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", "\r\n\r\n", " \n",
          "\u00a0", "\u3000", "\u2009", "\u202f", "\u0085", "\u2028", "\u2029", "\u000b", "\u000c",
          "\u200b", "\ufeff", "\u1680", "\u180e", "\u205f", " \t \n"]

SCRIPT_RANGES = [  # (first, last) code points of letters of many scripts
    (0x41, 0x5A), (0x61, 0x7A), (0xC0, 0xFF), (0x100, 0x17F), (0x180, 0x24F), (0x370, 0x3FF),
    (0x400, 0x4FF), (0x531, 0x587), (0x5D0, 0x5EA), (0x620, 0x64A), (0x671, 0x6D3),
    (0x700, 0x74F), (0x780, 0x7B1), (0x904, 0x939), (0x985, 0x9B9), (0xA05, 0xA39),
    (0xA85, 0xAB9), (0xB05, 0xB39), (0xB85, 0xBB9), (0xC05, 0xC39), (0xC85, 0xCB9),
    (0xD05, 0xD39), (0xD85, 0xDC6), (0xE01, 0xE30), (0xE81, 0xEB0), (0xF40, 0xF6C),
    (0x1000, 0x102A), (0x10A0, 0x10FF), (0x1100, 0x11FF), (0x1200, 0x135A), (0x13A0, 0x13F5),
    (0x1400, 0x167F), (0x1780, 0x17B3), (0x1820, 0x1878), (0x1E00, 0x1EFF), (0x1F00, 0x1FFF),
    (0x3041, 0x3096), (0x30A1, 0x30FA), (0x3105, 0x312F), (0x4E00, 0x9FFF), (0xA000, 0xA48C),
    (0xAC00, 0xD7A3), (0xF900, 0xFAFF), (0xFB50, 0xFDFF), (0xFE70, 0xFEFC), (0xFF21, 0xFF5A),
    (0x10400, 0x1044F), (0x1D400, 0x1D7FF), (0x20000, 0x2A6DF), (0x1F600, 0x1F64F),
]
MARK_RANGES = [(0x300, 0x36F), (0x483, 0x489), (0x591, 0x5C7), (0x610, 0x61A), (0x64B, 0x65F),
               (0x900, 0x903), (0x93A, 0x94F), (0x981, 0x983), (0xE31, 0xE31), (0xE34, 0xE3A),
               (0xE47, 0xE4E), (0x1AB0, 0x1AFF), (0x1DC0, 0x1DFF), (0x20D0, 0x20F0),
               (0xFE00, 0xFE0F), (0xFE20, 0xFE2F), (0x3099, 0x309A)]
DIGITS = "0123456789" + "٠١٢٣٤٥٦٧٨٩" + "०१२३४५६७८९" + "０１２３" + "²³¹¼½¾ⅠⅡⅫ①②⑩" + "๐๑๒"
PUNCT = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + list("¡¿«»…—–‘’“”•·§¶†‡‰′″‹›€£¥₹©®°±×÷")


def rand_cp(rng, ranges):
    a, b = rng.choice(ranges)
    return chr(rng.randint(a, b))


def rand_word(rng):
    a, b = rng.choice(SCRIPT_RANGES)
    return "".join(chr(rng.randint(a, b)) for _ in range(rng.randint(1, 9)))


def rand_marked(rng):
    base = rng.choice("aeiounAEIOUcsz") if rng.random() < 0.5 else rand_cp(rng, SCRIPT_RANGES)
    return base + "".join(rand_cp(rng, MARK_RANGES) for _ in range(rng.randint(1, 3)))


def rand_number(rng):
    kind = rng.randrange(7)
    if kind == 0:
        return str(rng.randint(0, 10 ** rng.randint(1, 40)))
    if kind == 1:
        return f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 8)}f}"
    if kind == 2:
        return f"{rng.randint(1, 999)},{rng.randint(0, 999):03d},{rng.randint(0, 999):03d}.{rng.randint(0, 99):02d}"
    if kind == 3:
        return f"+1 ({rng.randint(200, 999)}) {rng.randint(100, 999)}-{rng.randint(1000, 9999)}"
    if kind == 4:
        return f"{rng.uniform(0, 1):.3e}"
    if kind == 5:
        return "".join(rng.choice(DIGITS) for _ in range(rng.randint(1, 12)))
    return f"{rng.randint(1900, 2100)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:00:00Z"


def rand_json(rng, depth=0):
    k = rng.randrange(7 if depth < 3 else 4)
    if k == 0:
        return rng.randint(-10 ** 12, 10 ** 12)
    if k == 1:
        return round(rng.uniform(-1000, 1000), rng.randint(0, 6))
    if k == 2:
        return rng.choice([True, False, None])
    if k == 3:
        return rng.choice([rand_word(rng), rng.choice(SENTENCES)[:30], rng.choice(EMOJI), ""])
    if k in (4, 5):
        return {rand_word(rng) if rng.random() < 0.3 else f"key_{i}": rand_json(rng, depth + 1)
                for i in range(rng.randint(0, 5))}
    return [rand_json(rng, depth + 1) for _ in range(rng.randint(0, 5))]


def rand_random_cps(rng):
    out = []
    for _ in range(rng.randint(1, 20)):
        r = rng.random()
        if r < 0.5:
            cp = rng.randint(0x20, 0x2FFF)
        elif r < 0.8:
            cp = rng.randint(0x3000, 0xFFFD)
        else:
            cp = rng.randint(0x10000, 0x10FFFF)
        if 0xD800 <= cp <= 0xDFFF:
            cp = 0xFFFD
        out.append(chr(cp))
    return "".join(out)


def rand_mix(rng, specials):
    parts = []
    for _ in range(rng.randint(1, 12)):
        k = rng.randrange(14)
        if k == 0:
            parts.append(rng.choice(SENTENCES))
        elif k == 1:
            parts.append(rand_word(rng))
        elif k == 2:
            parts.append(rng.choice(SPACES) * rng.randint(1, 4))
        elif k == 3:
            parts.append(rand_number(rng))
        elif k == 4:
            parts.append(rng.choice(EMOJI))
        elif k == 5:
            parts.append(rand_marked(rng))
        elif k == 6:
            parts.append("".join(rng.choice(PUNCT) for _ in range(rng.randint(1, 5))))
        elif k == 7:
            parts.append(rng.choice(specials + NEAR_SPECIALS))
        elif k == 8:
            parts.append(rng.choice(URLS))
        elif k == 9:
            parts.append(rng.choice(CODE)[: rng.randint(5, 120)])
        elif k == 10:
            parts.append(rng.choice(["'s", "'S", "'ll", "'LL", "'ve", "'re", "'d", "'m", "'t", "'ſ"]))
        elif k == 11:
            parts.append(rand_random_cps(rng))
        elif k == 12:
            parts.append(unicodedata.normalize("NFD", rng.choice(SENTENCES)))
        else:
            parts.append(" " + rand_word(rng))
    return "".join(parts)


def build_corpus(rng):
    out = []
    add = out.append
    for s in SENTENCES + CODE + URLS + EMOJI + SPACES + SPECIALS3 + NEAR_SPECIALS:
        add(s)
        add(" " + s)
        add(s + "  ")
        add(unicodedata.normalize("NFD", s))
        add(unicodedata.normalize("NFKD", s))
    for s in SENTENCES:  # per-word slices and case variants
        words = s.split(" ")
        for i in range(len(words)):
            add(" ".join(words[i:]))
        add(s.upper())
        add(s.lower())
    for n in range(1, 40):  # whitespace runs and their mixtures with text
        add(" " * n)
        add("x" + " " * n + "y")
        add("\t" * n + "z")
        add("a\r\n" * n)
        add("line" + " " * n + "\n" + " " * n)
        add("\n" * n + "word")
    for _ in range(5500):
        add(rand_mix(rng, SPECIALS3))
    for _ in range(3000):
        add(" ".join(rand_word(rng) for _ in range(rng.randint(1, 10))))
    for _ in range(1500):
        add("".join(rand_marked(rng) for _ in range(rng.randint(1, 6))))
    for _ in range(1500):
        add(" ".join(rand_number(rng) for _ in range(rng.randint(1, 5))))
    for _ in range(1200):
        add("".join(rng.choice(EMOJI) + rng.choice(["", " ", "\u200d", "\ufe0f"])
                    for _ in range(rng.randint(1, 8))))
    for _ in range(1500):
        add(json.dumps(rand_json(rng), ensure_ascii=rng.random() < 0.5,
                       indent=rng.choice([None, 2, 4])))
    for _ in range(1500):
        add(rand_random_cps(rng))
    for _ in range(1500):
        code = rng.choice(CODE)
        add(code.replace("    ", rng.choice(["\t", "  ", "    ", "        "])))
        add(code[rng.randrange(len(code)):])
    for _ in range(1500):
        add(rng.choice(URLS) + rng.choice(["", " ", ".", ")", "/"]) + rand_word(rng))
    for _ in range(1000):
        s = rng.choice(SENTENCES)
        cut = rng.randrange(len(s) + 1)
        add(s[:cut] + rng.choice(SPECIALS3 + NEAR_SPECIALS) + s[cut:])
    for _ in range(1800):
        add("".join(rng.choice(SPACES) for _ in range(rng.randint(1, 10))) + rand_word(rng) +
            "".join(rng.choice(SPACES) for _ in range(rng.randint(0, 6))))
    for _ in range(40):  # long strings: CJK runs, long numbers, repeated text, long space runs
        add("".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(rng.randint(200, 2000))))
        add("".join(rng.choice("0123456789") for _ in range(rng.randint(100, 3000))))
        add(" " * rng.randint(100, 3000) + "end")
        add(" ".join(rng.choice(SENTENCES) for _ in range(rng.randint(5, 40))))
        add("a" * rng.randint(50, 3000))
    seen = set()
    unique = []
    for s in out:
        if s and s not in seen:
            seen.add(s)
            unique.append(s)
    return unique


def build_invalid(rng):
    cases = [b"\x80", b"\xff", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
             b"\xf0\x9f\x98", b"abc\xe4\xbd", b"\xe4\xbdabc", b"\xc3", b"\xc3\x28", b"\xa0\xa1",
             b"\xe2\x28\xa1", b"\xe2\x82\x28", b"\xf0\x28\x8c\xbc", b"\xf0\x90\x28\xbc",
             b"\xf8\xa1\xa1\xa1\xa1", b"\xfc\xa1\xa1\xa1\xa1\xa1", b"<|im_start|\xff>",
             b"<|im_start|>\xff<|im_end|>", b"hello \xf0\x9f\x91 world", b"\xef\xbb\xbf\xef\xbb"]
    for _ in range(300):
        good = rand_mix(rng, SPECIALS3).encode("utf-8")
        b = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(len(b) + 1)
            if rng.random() < 0.5 and len(b) > 0:
                b = b[:pos] + b[pos + 1:]  # drop a byte: often splits a character
            else:
                b[pos:pos] = bytes([rng.randint(0x80, 0xFF)])
        cases.append(bytes(b))
    return [c for c in cases if not _valid(c)]


def _valid(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "tests", "data", "tokenizer")
    rng = random.Random(20240611)
    corpus = build_corpus(rng)
    with open(os.path.join(out_dir, "corpus.jsonl"), "w", encoding="utf-8") as f:
        for s in corpus:
            f.write(json.dumps(s, ensure_ascii=False) + "\n")
    invalid = build_invalid(rng)
    with open(os.path.join(out_dir, "invalid_utf8.txt"), "w") as f:
        for b in invalid:
            f.write(b.hex() + "\n")
    print(f"{len(corpus)} strings, {sum(len(s.encode()) for s in corpus)} bytes; "
          f"{len(invalid)} invalid UTF-8 cases")


if __name__ == "__main__":
    main()
