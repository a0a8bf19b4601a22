"""Few-shot examples for the pre-trained (base model) prompts.

Written for this project (the DBG paper does not publish its examples). Queries are short, the
answers are checkable facts, and the better response is A in one judging example and B in the
other so the examples themselves do not teach a position preference.
"""

from __future__ import annotations

# (query, response_a, response_b, judgment)
JUDGE_HELPFUL = (
    ("What is the boiling point of water at sea level in degrees Celsius?",
     "Water boils at 100 degrees Celsius at sea level, where the air pressure is one atmosphere.",
     "Water boils at about 50 degrees.",
     "A"),
    ("Give me one tip for falling asleep faster.",
     "Sleep is important.",
     "Keep a fixed bedtime and put your phone away 30 minutes before it; the regular rhythm and "
     "less screen light help your body wind down.",
     "B"),
)

JUDGE_TRUTHFUL = (
    ("Can you see the Great Wall of China from the Moon with the naked eye?",
     "No. From the Moon the wall is far too narrow to see; even from low Earth orbit it is hard to spot.",
     "Yes, it is the only human-made structure visible from the Moon.",
     "A"),
    ("Do humans use only 10 percent of their brains?",
     "Yes, 90 percent of the brain stays inactive, which is why brain-training can unlock it.",
     "No. Brain imaging shows activity across virtually all regions over a day; the 10 percent "
     "figure is a myth.",
     "B"),
)

# (query, answer)
GENERATE = (
    ("What is the capital of Australia?",
     "The capital of Australia is Canberra. Sydney and Melbourne are larger cities, but Canberra was "
     "chosen as a compromise between them and has been the seat of government since 1927."),
    ("Write a haiku about autumn.",
     "Red leaves drift and fall,\ncool wind hums through empty trees,\nthe year exhales slow."),
    ("How do I reverse a list in Python?",
     "Use `my_list.reverse()` to reverse it in place, or `my_list[::-1]` (or `list(reversed(my_list))`) "
     "to get a new reversed list and keep the original unchanged."),
)

GENERATE_TRUTHFUL = GENERATE[:2]
