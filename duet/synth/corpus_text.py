"""Sentences for the synthetic speech corpus, written for this project and generated from templates.

Two kinds of text, both deterministic given a seed:

* **Voice-assistant requests** (about 65 % by default): timers, alarms, reminders, weather, lights and
  thermostat, music, shopping and to-do lists, arithmetic, unit conversion, calendar and general
  questions. Each intent has templates in :data:`ASSISTANT_TEMPLATES`; a ``{slot}`` is filled from
  :data:`SLOT_VALUES` (word lists) or :data:`NUMBER_SLOTS` (numbers spelled out in words). A slot name
  with a trailing digit (``{number2}``) is a second, independent draw of the same slot type.
  :func:`assistant_requests` returns :class:`Sentence` records that keep the intent and the raw slot
  values (``{"number": 12, "number2": 7}``), so a caller can compute an answer for the request.
* **Read speech** (the rest): short descriptive and narrative sentences assembled from the word banks
  in :data:`READ_TEMPLATES` / :data:`SLOT_VALUES`.

All text is lower case, without punctuation except apostrophes, numbers written out as words
("set a timer for twenty five minutes"), which is what LibriSpeech-style transcripts need
(:func:`to_transcript` upper-cases it).

Example::

    from duet.synth.corpus_text import generate_sentences
    for s in generate_sentences(5, seed=0):
        print(s.kind, s.intent, s.text)
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from duet.text import normalize_text
# numbers in words: the project's one speller (num2words), whose readings transcripts and scoring share
from duet.foundation.spelling import number_to_words, ordinal_to_words, year_to_words

# ----------------------------------------------------------------------------------------------------
# Word lists for slots (plain strings; one entry may hold several words)
# ----------------------------------------------------------------------------------------------------


def _words(text: str) -> tuple[str, ...]:
    """Split a ``|``-separated table into entries (entries may contain spaces)."""
    return tuple(w.strip() for w in text.split("|") if w.strip())


#: Word lists for ``{slot}`` names in the templates. Every entry is lower case, words only.
SLOT_VALUES: dict[str, tuple[str, ...]] = {
    "room": _words(
        "kitchen|living room|bedroom|bathroom|hallway|office|garage|dining room|basement|attic|"
        "nursery|guest room|porch|laundry room|study|playroom|garden shed|front hall"
    ),
    "on_off": _words("on|off"),
    "food": _words(
        "pasta|rice|pizza|eggs|bread|cookie|potato|chicken|tea|soup|cake|noodle|oatmeal|pie|"
        "fish|carrot|muffin|dumpling|lasagna|popcorn"
    ),
    "chore": _words(
        "water the plants|call the dentist|take out the recycling|pay the electric bill|feed the cat|"
        "walk the dog|buy more coffee|return the library books|pick up the dry cleaning|"
        "charge my phone|book a haircut|send the birthday card|clean the fish tank|check the mail|"
        "renew my passport|order new printer ink|defrost the freezer|change the bed sheets|"
        "wash the car|sweep the porch|fix the leaking tap|reply to my landlord|stretch for ten minutes|"
        "back up my laptop|bring the umbrella|lock the back door|move the car|pack my gym bag|"
        "empty the dishwasher|thank my neighbour|bake bread for the school fair|oil the squeaky gate"
    ),
    "grocery": _words(
        "milk|eggs|butter|flour|sugar|rice|apples|bananas|oranges|lemons|tomatoes|onions|garlic|"
        "spinach|carrots|potatoes|cheese|yogurt|bread|coffee|tea|honey|oats|peanut butter|olive oil|"
        "pasta|chicken|salmon|beans|lentils|cereal|jam|salt|pepper|cucumbers|grapes|strawberries|"
        "blueberries|mushrooms|broccoli|toilet paper|dish soap|toothpaste|paper towels|batteries|"
        "light bulbs|dog food|cat litter|sparkling water|orange juice|almonds|walnuts|tortillas|"
        "soy sauce|baking soda|cinnamon|pickles|avocados|cabbage|pears|plums|celery"
    ),
    "list_name": _words("shopping list|to do list|grocery list|packing list|weekend list|errand list"),
    "city": _words(
        "london|paris|tokyo|chicago|boston|seattle|denver|madrid|rome|berlin|dublin|cairo|sydney|"
        "toronto|vancouver|mumbai|lagos|nairobi|lima|oslo|helsinki|vienna|prague|lisbon|athens|"
        "istanbul|bangkok|seoul|manila|auckland|edinburgh|glasgow|cardiff|montreal|phoenix|atlanta|"
        "houston|miami|san diego|new york|los angeles|mexico city|buenos aires|cape town|stockholm"
    ),
    "day_ref": _words(
        "today|tomorrow|tonight|this evening|this afternoon|tomorrow morning|on monday|on tuesday|"
        "on wednesday|on thursday|on friday|on saturday|on sunday|this weekend|next week|"
        "the day after tomorrow"
    ),
    "weekday": _words("monday|tuesday|wednesday|thursday|friday|saturday|sunday"),
    "month": _words(
        "january|february|march|april|may|june|july|august|september|october|november|december"
    ),
    "weather_word": _words("rain|snow|be windy|be sunny|be foggy|storm|hail|be cloudy|freeze"),
    "genre": _words(
        "jazz|classical|rock|folk|blues|reggae|country|piano|ambient|dance|hip hop|soul|"
        "bluegrass|opera|lullaby|salsa|swing|gospel|funk|acoustic"
    ),
    "mood": _words(
        "relaxing|cheerful|calm|upbeat|quiet|energetic|sleepy|happy|gentle|loud|peaceful|focus"
    ),
    "band_adjective": _words(
        "silver|velvet|midnight|electric|paper|copper|wandering|golden|hollow|crimson|northern|"
        "lonely|broken|sleeping|painted|humble|restless|frozen|bright|distant"
    ),
    "band_noun": _words(
        "foxes|lanterns|rivers|pilots|sparrows|giants|teapots|engines|shadows|mirrors|owls|"
        "comets|strangers|bicycles|tigers|kettles|harbours|orchards|ghosts|whistles"
    ),
    "podcast_topic": _words(
        "history|science|cooking|gardening|football|travel|comedy|business|astronomy|music|"
        "chess|woodworking|mystery|language|health|film"
    ),
    "person": _words(
        "mum|dad|grandma|grandpa|my sister|my brother|aunt rosa|uncle ben|maria|james|priya|tom|"
        "olivia|samuel|fatima|lucas|chloe|daniel|hannah|oscar|nina|victor|grace|leo|amara|felix|"
        "ruby|ethan|isla|noah|the plumber|my boss|the school office|doctor patel|coach miller"
    ),
    "event": _words(
        "dentist appointment|team meeting|yoga class|piano lesson|book club|dinner reservation|"
        "job interview|haircut|parent evening|flight|train|project review|football practice|"
        "birthday party|doctor's appointment|lunch with priya|car service|swimming lesson"
    ),
    "short_message": _words(
        "i am running late|see you soon|dinner is ready|i will call you back|happy birthday|"
        "on my way|the door is open|thanks for today|can you pick up milk|the meeting moved to noon|"
        "good luck tomorrow|i left my keys at home|let's meet at the station|miss you already"
    ),
    "country": _words(
        "france|japan|canada|brazil|kenya|australia|egypt|norway|peru|india|mexico|italy|spain|"
        "portugal|greece|germany|poland|chile|argentina|vietnam|thailand|ireland|scotland|wales|"
        "iceland|finland|morocco|ghana|nepal|turkey|sweden|denmark|austria|hungary|colombia"
    ),
    "landmark": _words(
        "the eiffel tower|mount everest|the statue of liberty|big ben|the great pyramid|"
        "the empire state building|the leaning tower of pisa|table mountain|mount kilimanjaro|"
        "the golden gate bridge|the sydney opera house|niagara falls"
    ),
    "invention": _words(
        "telephone|light bulb|printing press|bicycle|radio|television|airplane|steam engine|"
        "microscope|telescope|computer|camera|refrigerator|sewing machine|typewriter|compass"
    ),
    "fact_topic": _words(
        "the moon|the sun|octopuses|volcanoes|honey bees|the ocean|penguins|the human heart|"
        "dinosaurs|lightning|rainbows|elephants|the planet mars|coral reefs|owls|glaciers|"
        "the deep sea|sharks|bamboo|hummingbirds|saturn|chocolate|ancient egypt|the rainforest"
    ),
    "celestial": _words("moon|sun|planet mars|planet jupiter|nearest star|planet venus|planet saturn"),
    "animal_plural": _words(
        "cats|dogs|penguins|giraffes|frogs|horses|ducks|owls|bears|rabbits|elephants|snails|"
        "squirrels|goats|sheep|parrots|lions|turtles"
    ),
    "vocab_word": _words(
        "serendipity|ephemeral|meticulous|ubiquitous|resilient|candid|frugal|whimsical|benevolent|"
        "pragmatic|eloquent|tenacious|nostalgia|ambiguous|diligent|gregarious|lucid|mundane|"
        "obscure|vivid|humble|curious|brittle|placid|sturdy|nimble|tranquil|vague|zealous"
    ),
    "language": _words(
        "french|spanish|german|italian|japanese|portuguese|dutch|swedish|polish|greek|turkish|welsh"
    ),
    "phrase": _words(
        "good morning|thank you very much|where is the station|how much does this cost|"
        "i would like a coffee|see you tomorrow|nice to meet you|the bill please|"
        "where is the nearest pharmacy|i am lost|have a good day|excuse me"
    ),
    "place": _words(
        "the airport|the train station|the nearest pharmacy|the city centre|the beach|the office|"
        "grandma's house|the hospital|the supermarket|the stadium|the museum|the library|"
        "the post office|the garden centre|the zoo|the harbour"
    ),
    "appliance": _words(
        "fan|heater|coffee machine|television|dishwasher|washing machine|robot vacuum|"
        "air purifier|kettle|sprinkler|porch light|fireplace|humidifier|oven"
    ),
    # read-speech word banks
    "character": _words(
        "the old fisherman|a young teacher|the baker|my neighbour|the tired nurse|a quiet boy|"
        "the little girl|our grandmother|the farmer|a stranger in a grey coat|the captain|"
        "the shopkeeper|my cousin|the postman|a tall woman|the gardener|the doctor|the twins|"
        "the night watchman|a clever student|the musician|the carpenter|the painter|his uncle|"
        "her best friend|the mayor|the librarian|a small child|the old soldier|the cook|"
        "the shepherd|the pilot|the engineer|a curious traveller|the school bus driver"
    ),
    "animal": _words(
        "the cat|a brown dog|the old horse|a grey squirrel|the goose|a young fox|the rabbit|"
        "a black crow|the donkey|a spotted cow|the kitten|a sleepy owl|the lamb|a tiny mouse|"
        "the heron|a stray puppy|the goat|a wild pony"
    ),
    "past_action": _words(
        "carried a basket of apples|painted the garden fence|opened the heavy door|"
        "counted the coins twice|fixed the broken chair|wrote a long letter|baked fresh bread|"
        "mended the torn sail|planted a row of beans|lit a small fire|swept the dusty floor|"
        "folded the clean laundry|sharpened the old knife|tuned the piano|fed the hungry birds|"
        "locked the wooden gate|climbed the steep hill|crossed the narrow bridge|rang the bell|"
        "packed a bag for the journey|read the newspaper aloud|hung the lantern by the door|"
        "filled the bucket with water|buttoned his coat|tied a red ribbon|pulled the cart uphill|"
        "sang an old song|drew a map of the valley|caught a silver fish|polished the brass handle|"
        "stacked the firewood|picked wild berries|watered the tomatoes|rowed across the lake"
    ),
    "animal_action": _words(
        "slept in the sun|chased a leaf|hid under the porch|waited by the gate|drank from the stream|"
        "ran across the field|watched the farmer|sat on the wall|dug a hole in the garden|"
        "followed the children home|jumped over the puddle|rolled in the grass|ate the last carrot|"
        "stood very still|climbed onto the roof|curled up by the stove"
    ),
    "scene_place": _words(
        "near the river|in the village square|behind the old mill|at the edge of the forest|"
        "on the station platform|in the crowded market|beside the lighthouse|under the oak tree|"
        "on the quiet beach|in the little kitchen|at the top of the stairs|by the harbour wall|"
        "across the frozen pond|in the empty classroom|outside the bakery|along the country lane|"
        "in the back garden|inside the barn|on the hillside|next to the fountain"
    ),
    "time_phrase": _words(
        "before sunrise|after dinner|late in the evening|early on sunday|during the storm|"
        "at noon|in the spring|every morning|last winter|after the rain stopped|at midnight|"
        "on a cold afternoon|before the guests arrived|while the kettle boiled|just after breakfast|"
        "at the end of summer|on the first day of school"
    ),
    "adjective": _words(
        "old|quiet|narrow|bright|dusty|wooden|crowded|gentle|heavy|small|ancient|cold|warm|"
        "empty|green|golden|muddy|shiny|broken|tall|round|soft|wide|dark|noisy|peaceful|"
        "crooked|pale|fresh|rusty|silent|steep|lonely|cheerful|faded|sturdy"
    ),
    "thing": _words(
        "house|bridge|road|garden|clock|window|boat|tower|lamp|chair|river|mountain|field|"
        "kitchen|letter|basket|wagon|fence|forest|table|staircase|chimney|harbour|orchard|"
        "cottage|lantern|valley|meadow|mirror|well|gate|path|cupboard|tent|sail|shed"
    ),
    "state_verb": _words(
        "stood|rested|waited|leaned|glowed|stretched|sat|appeared|remained|shone"
    ),
    "feeling": _words(
        "happy|nervous|proud|surprised|sleepy|hungry|curious|calm|worried|grateful|excited|"
        "lonely|brave|puzzled|relieved|cheerful|tired|restless"
    ),
    "weather_scene": _words(
        "the wind grew stronger|a light snow began to fall|the fog rolled in from the sea|"
        "the rain tapped on the windows|the sun broke through the clouds|thunder rumbled far away|"
        "the sky turned orange|the air smelled of pine|frost covered the grass|"
        "a cold breeze moved the curtains|the clouds drifted slowly east|the puddles began to freeze"
    ),
    "reason": _words(
        "the bus was late|the road was flooded|nobody had a key|the shop was closed|"
        "the bridge was being repaired|the clock had stopped|the lights went out|"
        "the letter never arrived|the train was full|it was far too cold outside"
    ),
}

# ----------------------------------------------------------------------------------------------------
# Number slots: each returns (words, raw value)
# ----------------------------------------------------------------------------------------------------


def _plural(n: int, unit: str) -> str:
    return f"{number_to_words(n)} {unit}" + ("" if n == 1 else "s")


def _duration(rng: random.Random) -> tuple[str, object]:
    unit = rng.choice(("second", "minute", "minute", "minute", "hour"))
    n = {"second": rng.choice((10, 15, 20, 30, 45, 90)), "minute": rng.randint(1, 90),
         "hour": rng.randint(1, 12)}[unit]
    if unit == "hour" and rng.random() < 0.3:
        return f"{_plural(n, 'hour')} and thirty minutes", (n * 60 + 30) * 60
    return _plural(n, unit), n * {"second": 1, "minute": 60, "hour": 3600}[unit]


#: Parts of the day a clock hour can be said with ("seven in the morning", never "two at night").
_DAY_PARTS = {"in the morning": range(5, 12), "in the afternoon": (12, 1, 2, 3, 4, 5),
              "in the evening": range(5, 11), "at night": (9, 10, 11, 12, 1, 2, 3)}


def _clock_time(rng: random.Random) -> tuple[str, object]:
    hour, minute = rng.randint(1, 12), rng.choice((0, 0, 5, 10, 15, 20, 30, 40, 45, 50))
    part = rng.choice([""] + [p for p, hours in _DAY_PARTS.items() if hour in hours])
    if minute == 0:
        words = f"{number_to_words(hour)} o'clock" if not part or rng.random() < 0.5 else number_to_words(hour)
    elif minute < 10:
        words = f"{number_to_words(hour)} oh {number_to_words(minute)}"
    else:
        words = f"{number_to_words(hour)} {number_to_words(minute)}"
    return (f"{words} {part}".strip(), (hour, minute, part))


def _number(rng: random.Random) -> tuple[str, object]:
    n = rng.choice((rng.randint(0, 20), rng.randint(0, 100), rng.randint(100, 999)))
    return number_to_words(n), n


def _small_number(rng: random.Random) -> tuple[str, object]:
    n = rng.randint(2, 12)
    return number_to_words(n), n


def _percent(rng: random.Random) -> tuple[str, object]:
    n = rng.choice((5, 10, 15, 20, 25, 30, 40, 50, 60, 70, 75, 80, 90))
    return number_to_words(n), n


def _temperature(rng: random.Random) -> tuple[str, object]:
    n = rng.randint(16, 26) if rng.random() < 0.6 else rng.randint(60, 78)
    return number_to_words(n), n


def _volume_level(rng: random.Random) -> tuple[str, object]:
    n = rng.randint(1, 10)
    return number_to_words(n), n


def _quantity(rng: random.Random) -> tuple[str, object]:
    n = rng.randint(2, 12)
    return number_to_words(n), n


def _year(rng: random.Random) -> tuple[str, object]:
    n = rng.randint(1850, 2020)
    return year_to_words(n), n


def _day_of_month(rng: random.Random) -> tuple[str, object]:
    n = rng.randint(1, 31)
    return ordinal_to_words(n), n


def _square(rng: random.Random) -> tuple[str, object]:
    root = rng.randint(2, 20)
    return number_to_words(root * root), root * root


#: Slots whose value is a number; each callable returns (words, raw value) so callers can compute answers.
NUMBER_SLOTS: dict[str, Callable[[random.Random], tuple[str, object]]] = {
    "duration": _duration,
    "clock_time": _clock_time,
    "number": _number,
    "small_number": _small_number,
    "percent": _percent,
    "temperature": _temperature,
    "volume_level": _volume_level,
    "quantity": _quantity,
    "year": _year,
    "day_of_month": _day_of_month,
    "square": _square,
}

#: Unit pairs for conversion questions: (smaller unit plural, larger unit plural / singular).
UNIT_PAIRS: tuple[tuple[str, str, str], ...] = (
    ("grams", "pounds", "pound"), ("ounces", "pounds", "pound"), ("grams", "kilograms", "kilogram"),
    ("centimeters", "inches", "inch"), ("inches", "feet", "foot"), ("feet", "miles", "mile"),
    ("meters", "kilometers", "kilometer"), ("cups", "liters", "liter"), ("milliliters", "cups", "cup"),
    ("teaspoons", "tablespoons", "tablespoon"), ("minutes", "days", "day"), ("seconds", "hours", "hour"),
    ("pints", "gallons", "gallon"), ("yards", "miles", "mile"), ("millimeters", "inches", "inch"),
)


def _unit_pair(rng: random.Random) -> tuple[str, object]:
    small, big_plural, big_singular = rng.choice(UNIT_PAIRS)
    n = rng.randint(1, 12)
    big = big_singular if n == 1 else big_plural
    return f"{small} in {number_to_words(n)} {big}", (small, n, big_plural)


def _conversion(rng: random.Random) -> tuple[str, object]:
    src, dst = rng.choice((("miles", "kilometers"), ("kilometers", "miles"), ("pounds", "kilograms"),
                           ("kilograms", "pounds"), ("liters", "gallons"), ("feet", "meters"),
                           ("inches", "centimeters"), ("cups", "milliliters")))
    n = rng.choice((rng.randint(2, 20), rng.choice((25, 30, 50, 100, 250, 500))))
    return f"{number_to_words(n)} {src} to {dst}", (n, src, dst)


def _degrees(rng: random.Random) -> tuple[str, object]:
    scale, other = rng.choice((("fahrenheit", "celsius"), ("celsius", "fahrenheit")))
    n = rng.randint(0, 100)
    return f"{number_to_words(n)} degrees {scale} in {other}", (n, scale, other)


NUMBER_SLOTS.update({"unit_pair": _unit_pair, "conversion": _conversion, "degrees": _degrees})

# ----------------------------------------------------------------------------------------------------
# Templates
# ----------------------------------------------------------------------------------------------------

#: Voice-assistant templates by intent. ``{slot}`` names refer to SLOT_VALUES or NUMBER_SLOTS.
ASSISTANT_TEMPLATES: dict[str, tuple[str, ...]] = {
    "timer": (
        "set a timer for {duration}", "start a countdown for {duration}", "set a {food} timer for {duration}",
        "how much time is left on my {food} timer", "cancel the {food} timer",
        "add {duration} to my timer", "pause the timer", "set two timers one for {duration} and one for {duration2}",
        "remind me in {duration} to check the {food}",
    ),
    "alarm": (
        "wake me up at {clock_time}", "set an alarm for {clock_time} on {weekday}",
        "turn off my {clock_time} alarm", "move my alarm to {clock_time}",
        "set a quiet alarm for {clock_time} on {weekday}", "what time is my alarm set for {weekday}",
        "snooze for {duration}", "delete all my alarms for {weekday}",
    ),
    "reminder": (
        "remind me to {chore} {day_ref}", "remind me to {chore} at {clock_time}",
        "remind me to {chore} when i get home", "set a reminder to {chore} every {weekday}",
        "what are my reminders for {day_ref}", "remind me in {duration} to {chore}",
        "cancel the reminder to {chore}",
    ),
    "weather": (
        "what is the weather like in {city} {day_ref}", "will it {weather_word} in {city} {day_ref}",
        "do i need an umbrella {day_ref}", "how hot will it be in {city} {day_ref}",
        "what is the temperature outside", "is it going to {weather_word} {day_ref}",
        "when does the sun set in {city} {day_ref}", "how windy is it in {city} right now",
        "give me the weather forecast for {weekday}",
    ),
    "smart_home": (
        "turn {on_off} the lights in the {room}", "dim the {room} lights to {percent} percent",
        "set the thermostat to {temperature} degrees", "make the {room} a little warmer",
        "turn {on_off} the {appliance}", "is the {appliance} still on",
        "switch the {room} lights to a warm colour", "lock the front door",
        "turn the heating down by {small_number} degrees", "close the blinds in the {room}",
        "what is the temperature in the {room}", "turn {on_off} the {appliance} in {duration}",
    ),
    "music": (
        "play some {genre} music", "play {mood} {genre} in the {room}",
        "play the latest album by the {band_adjective} {band_noun}", "skip this song",
        "turn the volume up to {volume_level}", "turn the volume down a little",
        "play the next episode of my {podcast_topic} podcast", "who sings this song",
        "shuffle my {mood} playlist", "play {genre} music for {duration}",
        "add this song to my {mood} playlist", "stop the music in the {room}",
    ),
    "lists": (
        "add {grocery} to my shopping list", "put {grocery} on the list for {weekday}",
        "what is on my {list_name}", "remove {grocery} from my {list_name}",
        "add {chore} to my to do list", "do i have {grocery} on my list",
        "add {grocery} and {grocery2} to my {list_name}", "clear my {list_name}",
        "read me my to do list for {day_ref}", "mark {chore} as done",
    ),
    "arithmetic": (
        "what is {number} plus {number2}", "what is {number} minus {small_number}",
        "what is {small_number} times {small_number2}", "what is {number} divided by {small_number}",
        "what is {percent} percent of {number}", "what is the square root of {square}",
        "add {number} and {number2}", "how much is {small_number} times {number}",
        "what is {number} squared",
    ),
    "conversion": (
        "how many {unit_pair}", "convert {conversion}", "what is {degrees}",
        "how many {unit_pair} roughly",
    ),
    "calendar": (
        "what is on my calendar {day_ref}", "schedule a meeting with {person} {day_ref} at {clock_time}",
        "move my {event} to {weekday}", "when is my next {event}", "what day is the {day_of_month} of {month}",
        "cancel my {event} {day_ref}", "how many days until the {day_of_month} of {month}",
        "add my {event} to the calendar for {weekday} at {clock_time}", "am i free {day_ref} at {clock_time}",
        "what day of the week was the {day_of_month} of {month} {year}",
    ),
    "general": (
        "what is the capital of {country}", "how tall is {landmark}", "who invented the {invention}",
        "how far away is the {celestial}", "tell me a fun fact about {fact_topic}",
        "what does the word {vocab_word} mean", "how do you spell {vocab_word}",
        "how do you say {phrase} in {language}", "tell me a joke about {animal_plural}",
        "what time is it in {city}", "how long does it take to drive to {place}",
        "what is the population of {country}", "when was the {invention} invented",
        "what language do they speak in {country}", "how old is {landmark}",
        "what happened in the year {year}", "give me directions to {place}",
    ),
    "communication": (
        "call {person}", "send a message to {person} saying {short_message}",
        "text {person} {short_message}", "read my new messages", "did {person} call me today",
        "call {person} on speaker", "send an email to {person} about my {event}",
    ),
}

#: Read-speech templates (short descriptive and narrative sentences).
READ_TEMPLATES: tuple[str, ...] = (
    "{character} {past_action} {time_phrase}",
    "{character} {past_action} {scene_place}",
    "{animal} {animal_action} {time_phrase}",
    "{animal} {animal_action} {scene_place}",
    "the {adjective} {thing} {state_verb} {scene_place}",
    "{character} felt {feeling} because {reason}",
    "{weather_scene} {time_phrase}",
    "{weather_scene} and {character} {past_action}",
    "{character} was {feeling} when {animal} {animal_action}",
    "we found a {adjective} {thing} {scene_place}",
    "nobody knew why {reason}",
    "{character} said that {reason}",
    "the {thing} was {adjective} and {adjective2}",
    "{time_phrase} {character} {past_action}",
    "there was a {adjective} {thing} {scene_place}",
    "{character} and {character2} met {scene_place}",
    "{character} lost a {adjective} {thing} {time_phrase}",
)

_SLOT_RE = re.compile(r"{([a-z_]+?)(\d*)}")
_ARTICLE_RE = re.compile(r"\ba ([aeiou])")


@dataclass(frozen=True)
class Sentence:
    """One generated sentence: ``kind`` is ``assistant`` or ``read``; ``slots`` holds raw slot values."""

    text: str
    kind: str
    intent: str
    template: str
    slots: dict = field(default_factory=dict, compare=False, hash=False)


def fill_template(template: str, rng: random.Random) -> tuple[str, dict]:
    """Fill every ``{slot}`` of ``template``; returns the text and the raw value of each slot."""
    values: dict[str, object] = {}

    def fill(match: re.Match) -> str:
        slot_type, name = match.group(1), match.group(0)[1:-1]
        if slot_type in NUMBER_SLOTS:
            words, raw = NUMBER_SLOTS[slot_type](rng)
        elif slot_type in SLOT_VALUES:
            words = raw = rng.choice(SLOT_VALUES[slot_type])
            while match.group(2) and raw in values.values() and len(SLOT_VALUES[slot_type]) > 1:
                words = raw = rng.choice(SLOT_VALUES[slot_type])  # "{adjective} and {adjective2}" differ
        else:
            raise KeyError(f"template {template!r}: unknown slot {{{name}}}")
        values[name] = raw
        return words

    text = _ARTICLE_RE.sub(r"an \1", _SLOT_RE.sub(fill, template))
    return " ".join(text.split()), values


def _draw(rng: random.Random, kind: str) -> Sentence:
    if kind == "assistant":
        intent = rng.choice(sorted(ASSISTANT_TEMPLATES))
        template = rng.choice(ASSISTANT_TEMPLATES[intent])
    else:
        intent, template = "read", rng.choice(READ_TEMPLATES)
    text, slots = fill_template(template, rng)
    return Sentence(text=text, kind=kind, intent=intent, template=template, slots=slots)


def iter_sentences(seed: int, domain_fraction: float = 0.65, exclude: Iterable[str] = (),
                   max_words: int | None = None) -> Iterator[Sentence]:
    """Endless stream of unique sentences; about ``domain_fraction`` of them are assistant requests.

    Each sentence's kind is drawn so that any prefix of the stream keeps the mix; texts in ``exclude``
    (compared after :func:`normalize_text`), repeats and sentences longer than ``max_words`` words
    are skipped (a short word limit keeps a bundled corpus small).
    """
    if not 0.0 <= domain_fraction <= 1.0:
        raise ValueError(f"domain_fraction must be in [0, 1], got {domain_fraction}")
    rng = random.Random(seed)
    seen = {normalize_text(t) for t in exclude}
    while True:
        kind = "assistant" if rng.random() < domain_fraction else "read"
        for _ in range(10_000):
            sentence = _draw(rng, kind)
            if sentence.text not in seen and not (max_words and len(sentence.text.split()) > max_words):
                break
        else:
            raise RuntimeError(f"the {kind} templates cannot produce more unique sentences")
        seen.add(sentence.text)
        yield sentence


def generate_sentences(n: int, seed: int = 0, domain_fraction: float = 0.65,
                       exclude: Iterable[str] = (), max_words: int | None = None) -> list[Sentence]:
    """``n`` unique sentences (deterministic given ``seed``), none of them in ``exclude``."""
    stream = iter_sentences(seed, domain_fraction, exclude, max_words)
    return [next(stream) for _ in range(n)]


def assistant_requests(n: int, seed: int = 0, exclude: Iterable[str] = ()) -> list[Sentence]:
    """``n`` unique voice-assistant requests (``Sentence.intent`` names the intent, ``slots`` the values)."""
    return generate_sentences(n, seed=seed, domain_fraction=1.0, exclude=exclude)


def to_transcript(text: str) -> str:
    """LibriSpeech transcript form: upper case words, apostrophes only; digits are refused."""
    if any(c.isdigit() for c in text):
        raise ValueError(f"transcript must spell numbers out in words: {text!r}")
    return normalize_text(text).upper()
